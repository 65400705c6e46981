/* hs_paths: where heapstore keeps its files by default.
 *
 * The default database is $XDG_DATA_HOME/heapstore/heapstore.db, with
 * XDG_DATA_HOME defaulting to ~/.local/share (HOME, else the password
 * database). The server (`heapstore-server --db` default), `heapstore import`
 * and the CLI's direct mode all use this one answer. Nothing here touches the
 * file system except hs_paths_mkdir_parent(), which creates the folders a path
 * needs.
 */
#ifndef HS_PATHS_H
#define HS_PATHS_H

#include <stddef.h>

/* Writes the default database path into out (len bytes). Returns 0,
 * HS_ETOOBIG if it does not fit, HS_ENOENT if no home folder is known. */
int hs_default_db_path(char *out, size_t len);

/* Creates the folders leading to path (mode 0700 for new ones), like
 * `mkdir -p "$(dirname path)"`. Returns 0 or HS_EIO. */
int hs_paths_mkdir_parent(const char *path);

#endif
