# common/ — libkfcommon.a: errors, logging, config, buffers, JSON helpers,
# the job model and the Redis queue protocol shared by every binary.
COMMON_SRCS := $(wildcard common/*.c)
COMMON_LIB  := $(BUILD)/lib/libkfcommon.a
$(COMMON_LIB): $(COMMON_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
# libkfcommon is the last library: everything else depends on it.
LIBS_TAIL += $(COMMON_LIB)
