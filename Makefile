# thermocline's build. Plain GNU Make: every .c under src/ is compiled, so a new
# file needs no edit here; the layout of src/ is the architecture (see README).
#
#   make            release build:   build/thermocline
#   make check      installs packages, builds with ASan+UBSan, runs every test
#   make demo       installs packages, builds, and runs the demo / lab
#   make unit       only the C unit tests (sanitized)

CC      ?= cc
BUILD   ?= build
PACKAGES = libbson-1.0 libmongoc-1.0 wiredtiger libuv yaml-0.1 libpcre2-8 libssl libcrypto snappy zlib

CFLAGS_COMMON = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
                -Wshadow -Wstrict-prototypes -g -Isrc $(shell pkg-config --cflags $(PACKAGES))
LDLIBS  = $(shell pkg-config --libs $(PACKAGES)) -lpthread -lm

ifeq ($(SANITIZE),1)
CFLAGS  = $(CFLAGS_COMMON) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDFLAGS = -fsanitize=address,undefined
else
CFLAGS  = $(CFLAGS_COMMON) -O2
LDFLAGS =
endif

SOURCES  = $(shell find src -name '*.c' | sort)
OBJECTS  = $(SOURCES:%.c=$(BUILD)/obj/%.o)
LIBRARY_OBJECTS = $(filter-out $(BUILD)/obj/src/main.o,$(OBJECTS))
UNIT_SOURCES = $(wildcard tests/unit/test_*.c)
UNIT_TESTS   = $(UNIT_SOURCES:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all check unit demo deps clean
all: $(BUILD)/thermocline

$(BUILD)/thermocline: $(OBJECTS)
	@echo "  LINK $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC   $<"
	@$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIBRARY_OBJECTS)
	@mkdir -p $(dir $@)
	@echo "  TEST $@"
	@$(CC) $(CFLAGS) -o $@ $< $(LIBRARY_OBJECTS) $(LDFLAGS) $(LDLIBS) -lcmocka

deps:
	bash scripts/install-deps.sh

unit:
	$(MAKE) --no-print-directory SANITIZE=1 BUILD=build/asan build/asan/thermocline $(UNIT_TESTS:$(BUILD)/%=build/asan/%)
	bash tests/run-unit.sh build/asan/tests

check: deps
	$(MAKE) --no-print-directory SANITIZE=1 BUILD=build/asan build/asan/thermocline $(UNIT_TESTS:$(BUILD)/%=build/asan/%)
	bash tests/run-all.sh build/asan

demo: deps all
	bash scripts/demo.sh $(BUILD)/thermocline

clean:
	rm -rf build

-include $(OBJECTS:.o=.d)
