# cli/ — `kforge`, the command-line client of the API (libcurl).  What the
# tests reach without a service (output, HTTP helpers) is libkfcli.a; the
# commands (kforge.c), `kforge tune` (tune.c), `kforge batch` (batch.c) and
# `kforge library` (library.c)
# are the binary's own.
CLI_LIB_SRCS := $(wildcard cli/cli_*.c)
CLI_LIB      := $(BUILD)/lib/libkfcli.a
$(CLI_LIB): $(CLI_LIB_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
LIBS += $(CLI_LIB)
$(BUILD)/bin/kforge: $(BUILD)/obj/cli/kforge.o $(BUILD)/obj/cli/tune.o $(BUILD)/obj/cli/batch.o \
                    $(BUILD)/obj/cli/library.o $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge
