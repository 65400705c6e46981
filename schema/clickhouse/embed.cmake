# Writes OUT: a C file holding schema/clickhouse/001_init.sql as the string
# hs_ch_schema_sql, so that the server carries its ClickHouse layout.
# Run with -DSRC=file -DOUT=file.
file(READ "${SRC}" sql)
string(REPLACE "\\" "\\\\" sql "${sql}")
string(REPLACE "\"" "\\\"" sql "${sql}")
string(REPLACE "\n" "\\n\"\n    \"" sql "${sql}")
set(body "/* Generated from ${SRC} by schema/clickhouse/embed.cmake; do not edit. */\n")
string(APPEND body "extern const char hs_ch_schema_sql[];\nconst char hs_ch_schema_sql[] =\n    \"${sql}\";\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
