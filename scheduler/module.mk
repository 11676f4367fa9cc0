# scheduler/ — libkfsched.a: the scheduler's duties (ks_sched.h: outbox
# relay, reaper, promoter, reconciliation and retention under a Redis
# leader lock); kforge-scheduler: flags and the tick loop around them.
SCHED_SRCS := $(filter-out scheduler/main.c,$(wildcard scheduler/*.c))
SCHED_LIB  := $(BUILD)/lib/libkfsched.a
$(SCHED_LIB): $(SCHED_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
# First in link order: it depends on libkfdb and common, nothing on it.
LIBS := $(SCHED_LIB) $(LIBS)

$(BUILD)/bin/kforge-scheduler: $(BUILD)/obj/scheduler/main.o $(SCHED_LIB) $(BUILD)/lib/libkfdb.a $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge-scheduler
