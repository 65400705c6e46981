/* hs_error: the one table of heapstore error codes.
 *
 * Every function that can fail returns 0 or a negative HS_E* code from this
 * table; hs_strerror() names it. Codes from libuv (negative errno values) and
 * SQLite are mapped into this space at the boundary where they occur, so a
 * caller never has to know which library failed. The table is an X-macro so
 * that the enum and the messages cannot drift apart.
 */
#ifndef HS_ERROR_H
#define HS_ERROR_H

#define HS_ERRNO_MAP(X)                                                                            \
    X(NOMEM, "out of memory")                                                                      \
    X(INVAL, "invalid argument")                                                                   \
    X(PROTO, "protocol error")                                                                     \
    X(TRUNC, "truncated input")                                                                    \
    X(AGAIN, "more input needed")                                                                  \
    X(RANGE, "value out of range")                                                                 \
    X(TOOBIG, "input exceeds a hard limit")                                                        \
    X(IO, "input/output error")                                                                    \
    X(NOENT, "no such object")                                                                     \
    X(EXIST, "object already exists")                                                              \
    X(DB, "database error")                                                                        \
    X(BUSY, "resource busy")                                                                       \
    X(AUTH, "not authorized")                                                                      \
    X(VERSION, "unsupported protocol or schema version")                                           \
    X(TIMEOUT, "timed out")                                                                        \
    X(NOTSUP, "not supported")                                                                     \
    X(CLOSED, "connection closed")                                                                 \
    X(NOSPC, "no space left on device")                                                            \
    X(CORRUPT, "stored data is corrupt")

enum {
    HS_OK = 0,
#define HS__ERR_ENUM(name, msg) HS_E##name,
    HS__ERR_FIRST = -1000,
    HS_ERRNO_MAP(HS__ERR_ENUM) HS__ERR_LAST
#undef HS__ERR_ENUM
};

/* A static, never-NULL description of an HS_E* code (or "success"). */
const char *hs_strerror(int err);

/* The symbolic name ("HS_EPROTO") of a code, for logs. */
const char *hs_errname(int err);

#define HS_COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

#endif
