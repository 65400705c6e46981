/* hs_error: messages and names for the HS_E* codes (see hs_error.h). */
#include "hs_error.h"

static const char *const messages[] = {
#define HS__ERR_MSG(name, msg) msg,
    HS_ERRNO_MAP(HS__ERR_MSG)
#undef HS__ERR_MSG
};

static const char *const names[] = {
#define HS__ERR_NAME(name, msg) "HS_E" #name,
    HS_ERRNO_MAP(HS__ERR_NAME)
#undef HS__ERR_NAME
};

static int index_of(int err)
{
    int i = err - HS__ERR_FIRST - 1;
    return (i >= 0 && i < (int)HS_COUNTOF(messages)) ? i : -1;
}

const char *hs_strerror(int err)
{
    if (err == 0) return "success";
    int i = index_of(err);
    return i < 0 ? "unknown error" : messages[i];
}

const char *hs_errname(int err)
{
    if (err == 0) return "HS_OK";
    int i = index_of(err);
    return i < 0 ? "HS_E?" : names[i];
}
