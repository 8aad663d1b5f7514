/* commands.h: the `ddphook` subcommands, one function each. */
#ifndef DDPH_CLI_COMMANDS_H
#define DDPH_CLI_COMMANDS_H

int cmd_check(int argc, char **argv);
int cmd_plugins(int argc, char **argv);
int cmd_describe(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);

#endif
