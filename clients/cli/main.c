/* heapstore: the command-line tool. Dispatches to the commands' cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "hs_cli.h"

static const hs_cli_command commands[] = {
    {"version", hs_cmd_version, "print the version of heapstore"},
    {"import", hs_cmd_import, "load .hsp stream files into the database"},
    {"dump", hs_cmd_dump, "print the frames of a stream file (.hsp)"},
    {"symbols", hs_cmd_symbols, "add debug files the server names frames from"},
    {"runs", hs_cmd_runs, "list the stored runs"},
    {"top", hs_cmd_top, "what is live at a moment, by site, function or stack"},
    {"history", hs_cmd_history, "live heap and RSS over a run"},
    {"diff", hs_cmd_diff, "what grew and shrank between two moments or two runs"},
    {"flame", hs_cmd_flame, "flame graph data (collapsed stacks or a JSON tree)"},
    {"leaks", hs_cmd_leaks, "what was live at the end and what grew steadily"},
    {"sizes", hs_cmd_sizes, "allocation size histogram and a suggested sample rate"},
    {"export", hs_cmd_export, "write pprof, speedscope, collapsed or dot files"},
    {"sql", hs_cmd_sql, "read-only SQL over the tables"},
    {"run", hs_cmd_run, "profile a program and summarize its heap"},
    {"check", hs_cmd_check, "gate for CI: budgets and a baseline, exit 1 when exceeded"},
    {"trend", hs_cmd_trend, "peak, end, leak rate… across many runs, or by a label"},
    {"gc", hs_cmd_gc, "remove runs by age, count or selector, and give the space back"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: heapstore COMMAND [ARGS…]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'heapstore COMMAND --help' describes one command.\n");
}

int hs_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("heapstore %s\n", HEAPSTORE_VERSION);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) return hs_cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "heapstore: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
