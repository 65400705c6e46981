/* hs_paths: the default locations of heapstore's files. */
#include "hs_paths.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hs_error.h"

int hs_default_db_path(char *out, size_t len)
{
    const char *xdg = getenv("XDG_DATA_HOME");
    int n;
    /* The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored. */
    if (xdg && xdg[0] == '/') {
        n = snprintf(out, len, "%s/heapstore/heapstore.db", xdg);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) {
            struct passwd *pw = getpwuid(getuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home || !*home) return HS_ENOENT;
        n = snprintf(out, len, "%s/.local/share/heapstore/heapstore.db", home);
    }
    return n < 0 || (size_t)n >= len ? HS_ETOOBIG : 0;
}

int hs_paths_mkdir_parent(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof buf) return HS_EIO;
    memcpy(buf, path, n + 1);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return 0;
    *slash = '\0';
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0700) && errno != EEXIST) return HS_EIO;
        *p = '/';
    }
    if (mkdir(buf, 0700) && errno != EEXIST) return HS_EIO;
    return 0;
}
