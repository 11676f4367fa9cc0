# agent/ — libkfagent.a: the tuning loop (compile, validate, profile,
# diagnose, plan, record), its built-in planner, the kernel library
# reader, and the LLM planner (ka_plan_llm) with its chat-completions
# client (ka_llm) and reward-hacking check (ka_hack).  Used by the worker's
# sim backend and by `kforge tune`.
AGENT_SRCS := $(wildcard agent/*.c)
AGENT_LIB  := $(BUILD)/lib/libkfagent.a
$(AGENT_LIB): $(AGENT_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
$(BUILD)/obj/agent/%.o: CFLAGS += -Iagent -Isim
LIBS += $(AGENT_LIB)
# The agent's benchmark links the agent library too (bench/module.mk's rule
# links only the simulator and common).
$(BUILD)/bench/agent_bench: $(BUILD)/obj/bench/agent_bench.o $(AGENT_LIB) $(BUILD)/lib/libkfsim.a $(BUILD)/lib/libkfcommon.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(EXTRA_LDLIBS) $(PKG_LIBS) $(LDLIBS)
