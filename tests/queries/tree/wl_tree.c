/* wl_tree: a process tree whose heap is known, for `heapstore run`'s tree
 * summary (test_run_tree.c).
 *
 *   wl_tree root   keeps 256 KiB, forks two children that exec
 *                  `wl_tree small` and then `wl_tree big`, waits for both and
 *                  exits with code 3;
 *   wl_tree small  peaks at 2 MiB (1.5 MiB freed), keeps 512 KiB;
 *   wl_tree big    peaks at 3 MiB (2 MiB freed), keeps 1 MiB, from 80 calls
 *                  of descend() deep: a stack longer than an answer's
 *                  default 64 frames (the dashboard asks for the rest).
 *
 * Nothing else allocates (no stdio), so with every allocation sampled each
 * run's peak and end are exactly these. The largest child is started last,
 * so that an order by peak differs from the order of the runs.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KIB 1024
#define MIB (1024 * KIB)

static void *volatile keep;

/* Allocates transient + kept bytes, frees transient, keeps kept. */
static void heap(size_t transient, size_t kept)
{
    void *volatile t = transient ? malloc(transient) : NULL;
    keep = malloc(kept);
    if ((transient && !t) || !keep) _exit(1);
    memset(keep, 1, kept);
    free(t);
}

/* Recursion that stays a frame a call (-O0: no tail call). */
__attribute__((noinline)) static void descend(int depth, size_t transient, size_t kept)
{
    if (depth > 0)
        descend(depth - 1, transient, kept);
    else
        heap(transient, kept);
    keep = keep; /* work after the call: not a tail call */
}

static pid_t spawn(const char *self, const char *mode)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, mode, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "small")) {
        heap(3 * MIB / 2, 512 * KIB);
        return 0;
    }
    if (!strcmp(mode, "big")) {
        descend(80, 2 * MIB, 1 * MIB);
        return 0;
    }
    if (strcmp(mode, "root")) return 2;
    heap(0, 256 * KIB);
    int st, ok = 1;
    pid_t a = spawn(argv[0], "small");
    if (a < 0 || waitpid(a, &st, 0) != a || !WIFEXITED(st) || WEXITSTATUS(st)) ok = 0;
    pid_t b = spawn(argv[0], "big");
    if (b < 0 || waitpid(b, &st, 0) != b || !WIFEXITED(st) || WEXITSTATUS(st)) ok = 0;
    return ok ? 3 : 1;
}
