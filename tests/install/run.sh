#!/usr/bin/env bash
# Install a build into a scratch prefix, then build and run consumers of it
# through find_package (shared and static) and through pkg-config.
set -euo pipefail
build=$1 work=$2 src=$3
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
test -f "$prefix/include/tensorframe/tensorframe.h"
test -f "$prefix/include/tensorframe/backend.h"
test -d "$prefix/lib/tensorframe"                       # the plugin directory
cmake -S "$src/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
cmake --build "$work/cmake" > "$work/build.log"
"$work/cmake/consumer"
"$work/cmake/consumer_static"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -std=c11 $(pkg-config --cflags tensorframe) "$src/consumer/consumer.c" -o "$work/consumer_pc" \
   $(pkg-config --libs tensorframe) -Wl,-rpath,"$prefix/lib"
"$work/consumer_pc"
cc -std=c11 $(pkg-config --cflags tensorframe) "$src/consumer/consumer.c" -o "$work/consumer_pc_static" \
   "$prefix/lib/libtensorframe.a" $(pkg-config --static --libs-only-l tensorframe | sed 's/-ltensorframe//')
"$work/consumer_pc_static"
echo "install: find_package (shared, static) and pkg-config (shared, static) consumers ran"
