# workers/ — kforge-worker: lease, run in a child process, report, ack.
# Everything but main.c is libkfworker.a so tests can drive the pieces.
WORKER_SRCS := $(filter-out workers/main.c,$(wildcard workers/*.c))
WORKER_LIB  := $(BUILD)/lib/libkfworker.a
$(WORKER_LIB): $(WORKER_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
# First in link order: a backend (sim) may depend on any later library.
LIBS := $(WORKER_LIB) $(LIBS)
$(BUILD)/obj/workers/%.o: CFLAGS += -Iworkers -Isim
$(BUILD)/bin/kforge-worker: $(BUILD)/obj/workers/main.o $(WORKER_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge-worker
