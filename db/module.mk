# db/ — libkfdb.a: the PostgreSQL adapter that moves a job (kf_db.h), built
# from the transition table in common/kf_life.h.  Linked by kforge-api and
# kforge-scheduler, the only binaries that hold database credentials.
DB_SRCS := $(wildcard db/*.c)
DB_LIB  := $(BUILD)/lib/libkfdb.a
$(DB_LIB): $(DB_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
LIBS += $(DB_LIB)
# The artifact store's PostgreSQL backend compresses with zlib (zlib1g-dev).
EXTRA_LDLIBS += -lz
