# embed_cdef.cmake - turns the preprocessed moonrl.h (IN) into a C file (OUT)
# defining `const char mr_host_cdef[]`. Bytes are written as hex so no quoting
# or line-length rule of C string literals can bite.
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}"
  "/* Generated from src/engine/moonrl.h by embed_cdef.cmake; do not edit. */\n"
  "const char mr_host_cdef[] = {\n${bytes}0x00};\n")
