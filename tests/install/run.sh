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
# The installed tf-info runs from its prefix with no library path set, and
# finds the installed plugins relative to the library.
out=$(env -u LD_LIBRARY_PATH -u TF_PLUGIN_PATH "$prefix/bin/tf-info")
echo "$out" | grep -q "auto -> " || { echo "$out"; echo "installed tf-info did not run"; exit 1; }
for plugin in "$prefix"/lib/tensorframe/libtensorframe-*.so; do
  [ -e "$plugin" ] || continue
  name=$(basename "$plugin" .so); name=${name#libtensorframe-}
  echo "$out" | grep -Eq "^  $name +loaded .*\[$plugin\]" || { echo "$out"; echo "installed tf-info did not load $plugin"; exit 1; }
done
test -f "$prefix/share/tensorframe/lsan.supp"
echo "install: find_package (shared, static) and pkg-config (shared, static) consumers and the installed tf-info ran"
