# xdp_embed.cmake - run as cmake -DIN=obj -DOUT=c -P: the XDP program's object
# file as a C array, so the library carries its program and finds it wherever
# it is installed.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n"
                     bytes "${bytes}")
file(WRITE ${OUT}
     "/* Generated from ulnet_xdp.bpf.c's object file (cmake/xdp_embed.cmake). */\n"
     "#include <stddef.h>\n"
     "extern const unsigned char uln_xdp_obj[];\n"
     "extern const size_t uln_xdp_obj_len;\n"
     "__attribute__((aligned(8))) const unsigned char uln_xdp_obj[] = {\n${bytes}\n};\n"
     "const size_t uln_xdp_obj_len = ${len};\n")
