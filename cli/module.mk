# cli/ — `kforge`, the command-line client of the API (libcurl).
CLI_SRCS := $(wildcard cli/*.c)
$(BUILD)/bin/kforge: $(CLI_SRCS:%.c=$(BUILD)/obj/%.o) $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge
