#!/usr/bin/env bash
# What ran on the H200 (bundle 39b1b20, ab4.log): ab3.sh's A/B in three rounds, with blocks of
# 512 × 16 two an SM as well.
cd "$(dirname "$0")/../../.."
ROUNDS=3 V="b512x32 b1024x16 b256x64 b256x32x2 b512x16x2" LOG=ab4.log \
  exec bash bench/results/2026-12-05-h100-part-elements/ab3.sh
