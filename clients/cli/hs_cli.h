/* hs_cli: the `heapstore` command-line tool.
 *
 * main.c dispatches `heapstore COMMAND ARGS…` through one table of commands;
 * each command lives in its own cmd_*.c and has the signature of hs_cli_fn:
 * it gets the arguments after its name (argv[0] is the command's name), prints
 * to stdout, writes errors to stderr as "heapstore COMMAND: message", and
 * returns the process exit code (0 success, 1 failure, 2 bad usage).
 */
#ifndef HS_CLI_H
#define HS_CLI_H

typedef int (*hs_cli_fn)(int argc, char **argv);

typedef struct hs_cli_command {
    const char *name;
    hs_cli_fn fn;
    const char *summary;
} hs_cli_command;

/* Each command; add one line to the table in main.c per new command. */
int hs_cmd_version(int argc, char **argv);
int hs_cmd_runs(int argc, char **argv);
int hs_cmd_top(int argc, char **argv);
int hs_cmd_history(int argc, char **argv);
int hs_cmd_diff(int argc, char **argv);
int hs_cmd_flame(int argc, char **argv);
int hs_cmd_leaks(int argc, char **argv);
int hs_cmd_sizes(int argc, char **argv);
int hs_cmd_export(int argc, char **argv);
int hs_cmd_sql(int argc, char **argv);
int hs_cmd_run(int argc, char **argv);
int hs_cmd_import(int argc, char **argv);
int hs_cmd_dump(int argc, char **argv);
int hs_cmd_symbols(int argc, char **argv);
int hs_cmd_check(int argc, char **argv);
int hs_cmd_trend(int argc, char **argv);
int hs_cmd_gc(int argc, char **argv);

#endif
