/* hs_spawn: start heapstore-server as a child and learn its port from it.
 *
 * The readiness handshake: the child gets the write end of a pipe and
 * `--ready-fd N`; once it accepts connections (and its signal handlers are
 * set) the server writes "PORT\n" to N and closes it. The parent reads one
 * line: a port means ready, end of file means the server exited before it
 * was ready (its log says why), and no line within the time limit means it
 * is stuck (the child is then killed). Nobody reads the server's log to
 * learn its state.
 *
 * Used by `heapstore run` (clients/cli) and by the test kits.
 */
#ifndef HS_SPAWN_H
#define HS_SPAWN_H

#include <sys/types.h>

typedef struct hs_spawn_opts {
    const char *exe;         /* heapstore-server */
    const char *const *args; /* its arguments after exe, NULL-terminated */
    int log_fd;              /* the child's stderr; -1 keeps ours */
    int quiet;               /* stdin and stdout on /dev/null */
    int own_group;           /* setpgid(0, 0): a Ctrl-C meant for us spares it */
    int no_preload;          /* LD_PRELOAD removed from its environment */
    int timeout_ms;          /* how long to wait for readiness */
} hs_spawn_opts;

/* Starts the server and waits for its readiness. Returns 0 with *pid and
 * *port; else -1 with *pid 0 and a reason in err (the child, if it was
 * started, has been reaped). */
int hs_spawn_server(const hs_spawn_opts *o, pid_t *pid, int *port, char *err, size_t errlen);

/* The server side: says port on fd and closes it (fd < 0: nothing). */
void hs_spawn_say_ready(int fd, int port);

#endif
