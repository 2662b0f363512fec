#!/usr/bin/env bash
# Builds the images the container tests run (ctest fixture `container_images`, both cores), so
# the tests after it find every layer cached.
source "$(dirname "$0")/lib.sh"
prepare_images
