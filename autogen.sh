#!/bin/sh
# Regenerates ./configure and the Makefile templates from a git checkout.
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --install --force --warnings=all
