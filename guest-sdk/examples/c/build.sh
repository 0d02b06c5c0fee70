#!/usr/bin/env sh
# Builds hello.c into hello.wasm (or $OUT), a neuronlab guest: a core wasm32 module that
# imports only from `neuronlab` and exports memory, neuronlab_abi_version and run.
#
# Needs clang with the wasm32 target and wasm-ld (Debian: clang, lld). No libc is used.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-clang}
OUT=${OUT:-$here/hello.wasm}

"$CC" --target=wasm32 -std=c11 -O2 -Wall -Wextra -Werror \
    -ffreestanding -nostdlib -mbulk-memory \
    -I "$here/../.." \
    -Wl,--no-entry \
    -o "$OUT" "$here/hello.c"

echo "built $OUT"
