# thermocline's build. Plain GNU Make: every .c under src/ is compiled, so a new
# file needs no edit here; the layout of src/ is the architecture (see README).
#
#   make            release build:   build/thermocline
#   make check      installs packages, builds (release, and ASan+UBSan), runs every test
#   make demo       installs packages, builds, and runs the demo / lab
#   make unit       only the C unit tests (sanitized)

CC      ?= cc
BUILD   ?= build
# Parallel compiles in check and unit: each of their builds compiles 170 files.
JOBS    ?= $(shell nproc)
PACKAGES = libbson-1.0 libmongoc-1.0 wiredtiger libuv yaml-0.1 libpcre2-8 libssl libcrypto snappy zlib icu-i18n icu-uc

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
	$(MAKE) --no-print-directory -j$(JOBS) SANITIZE=1 BUILD=build/asan build/asan/thermocline $(UNIT_TESTS:$(BUILD)/%=build/asan/%)
	bash tests/run-unit.sh build/asan/tests

check: deps
	$(MAKE) --no-print-directory -j$(JOBS) all
	$(MAKE) --no-print-directory -j$(JOBS) SANITIZE=1 BUILD=build/asan build/asan/thermocline $(UNIT_TESTS:$(BUILD)/%=build/asan/%)
	$(MAKE) --no-print-directory -j$(JOBS) fuzz
	bash tests/fuzz/run.sh 5
	bash tests/run-all.sh build/asan

demo: deps all
	bash scripts/demo.sh $(BUILD)/thermocline

clean:
	rm -rf build

-include $(OBJECTS:.o=.d)

# ---- Fuzzing (tests/fuzz/README.md) ------------------------------------------
#   make fuzz       libFuzzer targets in build/fuzz/ (clang, ASan + UBSan)
# The library is compiled again with coverage instrumentation into an archive, so
# each target links only the objects it reaches; files with a main() are left out.
FUZZ_CC      = clang
FUZZ_BUILD   = build/fuzz
FUZZ_CFLAGS  = $(CFLAGS_COMMON) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
               -fno-sanitize-recover=undefined
FUZZ_LIBRARY_SOURCES = $(shell grep -L -E '^int main\b' $(SOURCES))
FUZZ_LIBRARY_OBJECTS = $(FUZZ_LIBRARY_SOURCES:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_SOURCES = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_TARGETS = $(FUZZ_SOURCES:tests/fuzz/%.c=$(FUZZ_BUILD)/%)

.PHONY: fuzz
fuzz: $(FUZZ_TARGETS)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  FUZZCC $<"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<

$(FUZZ_BUILD)/libthermocline.a: $(FUZZ_LIBRARY_OBJECTS)
	@rm -f $@
	@ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_BUILD)/libthermocline.a
	@echo "  FUZZ $@"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Itests/fuzz -o $@ $< \
		$(FUZZ_BUILD)/libthermocline.a $(LDLIBS)

-include $(FUZZ_LIBRARY_OBJECTS:.o=.d)
