# cli/ — `kforge`, the command-line client of the API (libcurl).  What the
# tests reach without a service (output, HTTP helpers) is libkfcli.a; the
# commands (kforge.c), `kforge tune` (tune.c), `kforge batch` (batch.c),
# `kforge library` (library.c) and the stdio loop of `kforge mcp` (mcp.c)
# are the binary's own.  The MCP core (cli_mcp.c) calls the agent's
# ka_eval, so libkfcli goes first in the link order (it depends on agent/).
CLI_LIB_SRCS := $(wildcard cli/cli_*.c)
CLI_LIB      := $(BUILD)/lib/libkfcli.a
$(CLI_LIB): $(CLI_LIB_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
LIBS := $(CLI_LIB) $(LIBS)
$(BUILD)/bin/kforge: $(BUILD)/obj/cli/kforge.o $(BUILD)/obj/cli/tune.o $(BUILD)/obj/cli/batch.o \
                    $(BUILD)/obj/cli/library.o $(BUILD)/obj/cli/mcp.o $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge
