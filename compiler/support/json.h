#pragma once
// A minimal JSON writer for reports and benchmark results (no parsing needed anywhere).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace tilefuse {

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }
  JsonWriter& key(const std::string& k) {
    comma();
    out_ += quote(k) + ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(const std::string& v) { return raw(quote(v)); }
  JsonWriter& value(const char* v) { return raw(quote(v)); }
  JsonWriter& value(bool v) { return raw(v ? "true" : "false"); }
  JsonWriter& value(int v) { return raw(std::to_string(v)); }
  JsonWriter& value(int64_t v) { return raw(std::to_string(v)); }
  JsonWriter& value(double v) { return raw(std::isfinite(v) ? fmt::format("{}", v) : "null"); }
  JsonWriter& null() { return raw("null"); }
  template <typename T>
  JsonWriter& field(const std::string& k, const T& v) {
    return key(k).value(v);
  }
  template <typename T>
  JsonWriter& array(const std::string& k, const std::vector<T>& v) {
    key(k).begin_array();
    for (const T& x : v) value(x);
    return end_array();
  }
  const std::string& str() const { return out_; }

  static std::string quote(const std::string& s) {
    std::string q = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\')
        q += '\\', q += static_cast<char>(c);
      else if (c == '\n')
        q += "\\n";
      else if (c < 0x20)
        q += fmt::format("\\u{:04x}", c);
      else
        q += static_cast<char>(c);
    }
    return q + "\"";
  }

 private:
  void comma() {
    if (!first_.empty() && !first_.back()) out_ += ", ";
    if (!first_.empty()) first_.back() = false;
  }
  JsonWriter& raw(const std::string& s) {
    if (!after_key_) comma();
    after_key_ = false;
    out_ += s;
    return *this;
  }
  JsonWriter& open(char c) {
    if (!after_key_) comma();
    after_key_ = false;
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace tilefuse
