/*
 * sim_profile_cli — `kforge-sim profile`: run a kernel in the sandbox, time
 * it, and print why it is slow.
 *
 * The kernel runs in a sandboxed child (sim_sandbox.h) like `kforge-sim run`;
 * the child builds the profile from the instruction record, writes
 * DIR/profile.json (summary, bounds, findings, lines), DIR/instructions.json
 * (the instruction table) and DIR/trace.json (Chrome/Perfetto trace), and
 * sends the profile back.  The parent prints one screen (summary, bounds, top
 * findings with their lines) or, with --json, the profile document.
 *
 * Exit status: 0 profiled, 2 the kernel failed (simulator error, crash,
 * limit), 3 usage error.
 */
#ifndef SIM_PROFILE_CLI_H
#define SIM_PROFILE_CLI_H

extern const char sim_profile_cli_usage[];

/* argv[0] is "profile"; returns the exit status. */
int sim_profile_cli_main(int argc, char **argv);

#endif
