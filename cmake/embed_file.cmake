# Embed a text file as a NUL-terminated C array: -DIN=file -DOUT=header -DNAME=symbol
file(READ ${IN} content HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," content "${content}")
file(WRITE ${OUT} "/* generated from ${IN}; do not edit */\n"
  "static const char ${NAME}[] = {${content} 0x00};\n"
  "static const size_t ${NAME}_len = sizeof(${NAME}) - 1;\n")
