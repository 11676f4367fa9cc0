# agent/ — libkfagent.a: the tuning loop (compile, validate, profile,
# diagnose, plan, record), its built-in planner and the kernel library
# reader.  Used by the worker's sim backend and by `kforge tune`.
AGENT_SRCS := $(wildcard agent/*.c)
AGENT_LIB  := $(BUILD)/lib/libkfagent.a
$(AGENT_LIB): $(AGENT_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
$(BUILD)/obj/agent/%.o: CFLAGS += -Iagent -Isim
LIBS += $(AGENT_LIB)
