# python3 workload for tests/collector/test_python_shapes.c: allocations made
# by C code that Python called. zlib (in Debian's python3 a built-in module
# over libz.so), json's C accelerator (_json) and sqlite3 (_sqlite3 over
# libsqlite3.so), each called K times from a marked line ("# LINE name").
# Prints "cext PID K RAW COMP JSON_LEN STRINGS BLOB".
import json
import os
import sqlite3  # LINE import_sqlite
import zlib

K = 4
RAW = bytes(range(256)) * 4096  # 1 MiB that compresses well
STR_N, STR_LEN = 64, 20000  # json: STR_N strings of STR_LEN ASCII characters
BLOB = 300007  # sqlite3: randomblob(BLOB)
kept = []


def squeeze():
    for _ in range(K):
        comp = zlib.compress(RAW)  # LINE compress
        kept.append(zlib.decompress(comp))  # LINE decompress
    return len(comp)


def encode(doc):
    return json.dumps(doc)  # LINE dumps


def decode(text):
    return json.loads(text)  # LINE loads


def query():
    conn = sqlite3.connect(":memory:")
    for _ in range(K):
        kept.append(conn.execute("SELECT randomblob(?)", (BLOB,)).fetchone())  # LINE sqlite
    conn.close()


comp_len = squeeze()
doc = {"items": [chr(97 + i % 26) * STR_LEN for i in range(STR_N)], "n": STR_N}
text = encode(doc)
back = decode(text)
assert back == doc
query()
print("cext", os.getpid(), K, len(RAW), comp_len, len(text), STR_N * STR_LEN, BLOB, flush=True)
