// emulation.h: runs the CUDA kernels of kernels/*.cu on the host, unchanged, for the host
// emulation driver of src/device (GS_CUDA_EMULATE=1). The driver compiles each spliced kernel
// module with the system C++ compiler (C++20) with this header in front, the same -D constants
// as NVRTC, and a generated `gs_emu_launch_<entry>` wrapper per entry point.
//
// Execution model (what a kernel can observe):
// - A launch runs its blocks one after another, in an order shuffled by the launch's seed, on
//   the calling host thread. Launches of one module are serialised (a mutex), so `__shared__`
//   variables (function-local statics here) are block-shared storage, exactly as on a GPU.
// - Every thread of a block is a fiber with its own stack. A fiber runs until it reaches a
//   barrier or a warp collective (or returns); only then does another fiber run, in an order
//   shuffled per round. So a thread always runs "as far ahead as it can": a missing
//   __syncthreads between a shared-memory write and another thread's read, or between a read
//   and the next overwrite, gives a wrong result every time instead of once in a while.
// - __syncthreads*(): released when every thread of the block that has not returned is
//   waiting at the same barrier (same source line); threads that returned count as arrived, as
//   on Volta and later. Threads waiting at different barriers, or some at a barrier while the
//   others wait at a warp collective, is divergence: the launch fails with a message naming
//   the kernel, block, lines and thread counts (a GPU would hang or corrupt silently).
// - Warp collectives (__shfl*_sync, __any/__all/__ballot_sync, __match_any_sync, __syncwarp):
//   released when every live lane of the warp waits at the same collective (same line, same
//   mask); the mask must name exactly the warp's live lanes, otherwise the launch fails (on a
//   GPU, a mask naming a lane that exited or diverged is undefined behaviour).
// - A float4 load or store at an address that is not 16-byte aligned fails the launch, as it
//   faults on a GPU.
// - Atomics are plain read-modify-writes (one host thread runs everything), with CUDA's return
//   values. Math uses the host libm: expf/logf/sqrtf may differ from the GPU's by an ulp or
//   two, which the parity tolerances allow; but the rasterizers' e^−σ (GS_RASTER_EXP) is the
//   CPU rasterizer's own polynomial, so the forward pass stays the CPU's bit for bit and a
//   kernel's slip cannot hide inside an ulp of libm. FMA contraction is off in both drivers.
//
// - Launch arguments are checked against the kernel's signature (count, and pointer / 32- or
//   64-bit integer / float / double for each), which cuLaunchKernel takes on trust.
//
// What it does not model: timing, occupancy and resource limits (registers, shared-memory
// size), memory coalescing and bank conflicts, warp-divergence cost, the relaxed ordering of
// global memory between blocks (blocks never overlap here), and the initial contents of shared
// memory (statics start zeroed once, then keep the previous block's values, which a GPU does
// not promise either). Out-of-bounds accesses are found by building with AddressSanitizer
// (GS_EMU_SANITIZE=address), not by this header.
#ifndef GS_HOST_EMULATION_H
#define GS_HOST_EMULATION_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <mutex>
#include <type_traits>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#define GS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_EMU_ASAN 1
#endif
#endif
#ifdef GS_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__) || defined(GS_EMU_UCONTEXT)
#include <ucontext.h>
#define GS_EMU_USE_UCONTEXT 1
#endif

// ---- CUDA keywords and built-in variables ----------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static
#define __launch_bounds__(...)
// __restrict__ is a GCC/Clang keyword already.

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
typedef dim3 uint3;

using std::isfinite;
using std::isinf;
using std::isnan;

namespace gs_emu {

enum class State : unsigned char { Ready, AtBlock, AtWarp, Done };

enum Op : int {
    OpSync,
    OpShflIdx,
    OpShflUp,
    OpShflDown,
    OpShflXor,
    OpAny,
    OpAll,
    OpBallot,
    OpMatchAny,
    OpSyncWarp,
};

struct Lane {
    void* sp = nullptr;  // saved stack pointer (x86-64 switch) while not running
#ifdef GS_EMU_USE_UCONTEXT
    ucontext_t uc;
#endif
    dim3 tid;
    unsigned linear = 0;
    State state = State::Ready;
    // The pending barrier or collective.
    int op = 0;
    int line = 0;
    unsigned mask = 0;
    int arg = 0;
    int width = 32;
    uint64_t val = 0;
    uint64_t result = 0;
    // The lane this one switches to when it stops, in the current round; nullptr: the
    // scheduler (see run_round).
    Lane* next = nullptr;
};

struct Run {
    const char* kernel = "";
    dim3 block_idx, block_dim, grid_dim;
    Lane* lanes = nullptr;
    unsigned nlanes = 0;
    void (*body)(void*) = nullptr;
    void* body_ctx = nullptr;
    void* sched_sp = nullptr;
#ifdef GS_EMU_USE_UCONTEXT
    ucontext_t sched_uc;
#endif
    unsigned char* stacks = nullptr;
    size_t stack_size = 0;
    bool failed = false;
    char* err = nullptr;
    size_t errlen = 0;
#ifdef GS_EMU_ASAN
    void* asan_fake = nullptr;
    const void* sched_stack_bottom = nullptr;
    size_t sched_stack_size = 0;
    bool asan_from_sched = false;  // the switch under way is the scheduler's (asan_finish)
#endif
};

inline Run* g_run = nullptr;
inline Lane* g_cur = nullptr;

}  // namespace gs_emu

#define threadIdx (::gs_emu::g_cur->tid)
#define blockIdx (::gs_emu::g_run->block_idx)
#define blockDim (::gs_emu::g_run->block_dim)
#define gridDim (::gs_emu::g_run->grid_dim)
#define warpSize 32

namespace gs_emu {

// ---- fibers ----------------------------------------------------------------------------------
#ifndef GS_EMU_USE_UCONTEXT
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save and
// resumes the fiber whose stack pointer is `to`. MXCSR and the x87 control word are callee-saved
// too, but every fiber of a launch runs on one thread whose floating-point modes no kernel can
// change (CUDA C++ has no way to), so they are not switched: `ldmxcsr` and `fldcw` are slow,
// partly serialising instructions, and a warp collective switches 33 times (see run_round).
extern "C" void gs_emu_switch(void** save, void* to);
asm(R"(
    .text
    .globl gs_emu_switch
    .hidden gs_emu_switch
    .type gs_emu_switch,@function
gs_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size gs_emu_switch,.-gs_emu_switch
)");
#endif

// How a round runs: the scheduler links the round's Ready lanes through Lane::next in their
// shuffled order and switches to the first (run_round); a lane that stops, at a barrier, a
// collective or its return, switches straight to the next one, and the last one back to the
// scheduler. That is the order in which resuming them one by one from the scheduler would run
// them, since a running lane changes no other lane's state (only the scheduler releases
// barriers and collectives), but it takes n + 1 switches instead of 2n.

inline unsigned char* lane_stack(Run* r, unsigned i) { return r->stacks + (size_t)i * r->stack_size; }

#ifdef GS_EMU_ASAN
// Tells ASan that the running fiber switches to lane `to` (nullptr: the scheduler) and gives it
// that stack's bounds; `fake_save` keeps the running fiber's fake stack (nullptr: the fiber is
// finished with).
inline void asan_start(Run* r, void** fake_save, const Lane* to) {
    if (to)
        __sanitizer_start_switch_fiber(fake_save, lane_stack(r, to->linear) + 4096,
                                       r->stack_size - 4096);
    else
        __sanitizer_start_switch_fiber(fake_save, r->sched_stack_bottom, r->sched_stack_size);
}

// Called first on a lane's stack each time it is switched to. The scheduler's stack (the host
// thread's) is the one bound this code cannot know otherwise, so the lane that the scheduler
// switches to records it for the round's last lane to switch back with; a lane switched to by
// another lane has nothing to record.
inline void asan_finish(Run* r, void* fake) {
    if (r->asan_from_sched) {
        r->asan_from_sched = false;
        __sanitizer_finish_switch_fiber(fake, &r->sched_stack_bottom, &r->sched_stack_size);
    } else {
        __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
    }
}
#endif

inline void lane_entry() {
    Run* r = g_run;
#ifdef GS_EMU_ASAN
    asan_finish(r, nullptr);
#endif
    r->body(r->body_ctx);
    Lane* l = g_cur;
    l->state = State::Done;
    Lane* next = l->next;
    if (next) g_cur = next;
#ifdef GS_EMU_ASAN
    asan_start(r, nullptr, next);  // nullptr: this fiber's stack is finished with
#endif
#ifdef GS_EMU_USE_UCONTEXT
    setcontext(next ? &next->uc : &r->sched_uc);
#else
    void* dead;
    gs_emu_switch(&dead, next ? next->sp : r->sched_sp);
#endif
    __builtin_unreachable();
}

#ifdef GS_EMU_USE_UCONTEXT
inline void lane_entry_uc() { lane_entry(); }
#endif

// How far below the top of its slot lane i's stack starts. The stack tops are where every
// switch reads and writes (saved registers, the frames of the wait); stacks a power of two
// apart put all of them in the same cache sets, where the lanes of a round evict one another
// (the first load from the switched-to stack was the emulation's hottest instruction). Slots
// a page more than a power of two apart (stack_bytes) and these offsets, different for the 32
// lanes of a warp, spread them over the sets.
inline size_t stack_color(unsigned i) { return (size_t)(i % 32) * 128; }

// Prepares lane i to start the kernel body at its next resume.
inline void lane_init(Run* r, unsigned i) {
    Lane& l = r->lanes[i];
    // The lowest page of each stack is a guard page (PROT_NONE).
    unsigned char* base = lane_stack(r, i);
#ifdef GS_EMU_ASAN
    // The previous block's frames on this stack ended without unwinding: clear their redzones.
    __asan_unpoison_memory_region(base + 4096, r->stack_size - 4096);
#endif
#ifdef GS_EMU_USE_UCONTEXT
    getcontext(&l.uc);
    l.uc.uc_stack.ss_sp = base + 4096;
    l.uc.uc_stack.ss_size = r->stack_size - 4096 - stack_color(i);
    l.uc.uc_link = nullptr;
    makecontext(&l.uc, lane_entry_uc, 0);
#else
    uintptr_t top = ((uintptr_t)(base + r->stack_size - stack_color(i))) & ~(uintptr_t)15;
    // Layout popped by gs_emu_switch: [r15][r14][r13][r12][rbx][rbp][ret], then 8 bytes of
    // padding: after the `ret`, sp ≡ 8 (mod 16), so that lane_entry starts with the
    // alignment of a called function.
    uint64_t* sp = (uint64_t*)(top - 64);
    for (int k = 0; k < 6; ++k) sp[k] = 0;
    sp[6] = (uint64_t)(uintptr_t)&lane_entry;
    sp[7] = 0;
    l.sp = sp;
#endif
}

// Scheduler → the round's first lane; returns when its last lane has stopped.
inline void run_round(Run* r, Lane* head) {
    g_cur = head;
#ifdef GS_EMU_ASAN
    r->asan_from_sched = true;
    asan_start(r, &r->asan_fake, head);
#endif
#ifdef GS_EMU_USE_UCONTEXT
    swapcontext(&r->sched_uc, &head->uc);
#else
    gs_emu_switch(&r->sched_sp, head->sp);
#endif
#ifdef GS_EMU_ASAN
    __sanitizer_finish_switch_fiber(r->asan_fake, nullptr, nullptr);
#endif
}

// The running lane stops: on to the round's next lane, or back to the scheduler; returns when
// this lane is switched to again (a later round).
inline void yield() {
    Run* r = g_run;
    Lane* l = g_cur;
    Lane* next = l->next;
    if (next) g_cur = next;
#ifdef GS_EMU_ASAN
    void* fake = nullptr;
    asan_start(r, &fake, next);
#endif
#ifdef GS_EMU_USE_UCONTEXT
    swapcontext(&l->uc, next ? &next->uc : &r->sched_uc);
#else
    gs_emu_switch(&l->sp, next ? next->sp : r->sched_sp);
#endif
#ifdef GS_EMU_ASAN
    asan_finish(r, fake);
#endif
}

inline uint64_t wait_at(State s, int op, int line, unsigned mask, uint64_t val, int arg,
                        int width) {
    Lane* l = g_cur;
    l->state = s;
    l->op = op;
    l->line = line;
    l->mask = mask;
    l->val = val;
    l->arg = arg;
    l->width = width;
    yield();
    return l->result;
}

template <typename T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp value type");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <typename T>
inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

inline void fail(Run* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void fail(Run* r, const char* fmt, ...) {
    if (r->failed) return;
    r->failed = true;
    int n = snprintf(r->err, r->errlen, "%s, block (%u,%u,%u): ", r->kernel, r->block_idx.x,
                     r->block_idx.y, r->block_idx.z);
    if (n < 0 || (size_t)n >= r->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errlen - n, fmt, ap);
    va_end(ap);
}

struct Rng {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    // Lemire's multiply-shift instead of `% n`: no 64-bit division per lane per round (its
    // bias, below n / 2³², does not matter for a schedule).
    unsigned below(unsigned n) { return (unsigned)(((next() >> 32) * (uint64_t)n) >> 32); }
};

template <typename T>
inline void shuffle(T* a, unsigned n, Rng& rng) {
    Rng g = rng;  // in a register (see link_round)
    for (unsigned i = n; i > 1; --i) std::swap(a[i - 1], a[g.below(i)]);
    rng = g;
}

// One round of a warp whose lanes are L[0..cnt): shuffles their order (the draws and swaps of
// `shuffle`, so the same order) and links the Ready ones through Lane::next in it. Returns the
// first, or nullptr. Fisher–Yates fixes the positions from the last down, so the list grows at
// its front while the shuffle runs, with no second pass; a fixed position is never read again,
// so the swap only moves the displaced entry down.
inline Lane* link_round(Lane* L, unsigned cnt, Rng& rng, unsigned* order) {
    // The generator's state in a register: with -fno-strict-aliasing the stores below could
    // alias `rng`, and storing and reloading it would lengthen the draws' dependency chain.
    Rng g = rng;
    for (unsigned k = 0; k < cnt; ++k) order[k] = k;
    Lane* head = nullptr;
    for (unsigned i = cnt; i > 0; --i) {
        unsigned k = order[i - 1];  // position i - 1's entry once the swap is done
        if (i > 1) {
            const unsigned j = g.below(i);
            const unsigned kj = order[j];
            order[j] = k;
            k = kj;
        }
        Lane* l = &L[k];
        if (l->state == State::Ready) {
            l->next = head;
            head = l;
        }
    }
    rng = g;
    return head;
}

// The shuffle's source lane for lane `lane` (CUDA's rules: a source outside the lane's
// `width`-segment leaves the lane its own value).
template <int Op>
inline int shfl_src(unsigned lane, int arg, int width) {
    const unsigned seg = lane & ~(unsigned)(width - 1);  // first lane of this segment
    if constexpr (Op == OpShflIdx) {
        return (int)seg + (arg & (width - 1));
    } else if constexpr (Op == OpShflUp) {
        return (int)lane - arg < (int)seg ? (int)lane : (int)lane - arg;
    } else if constexpr (Op == OpShflDown) {
        return (int)(lane - seg) + arg >= width ? (int)lane : (int)lane + arg;
    } else {
        const int s = (int)lane ^ arg;
        return s >= (int)seg + width || s < (int)seg ? (int)lane : s;
    }
}

// Releases a shuffle of warp w (lanes L[0..cnt), `live` of them live and waiting at it). One
// loop per kind of shuffle: the op is the same for every lane, so it is not switched on per lane.
// A failure abandons the block, so lanes already marked Ready by then never run again.
template <int Op>
inline bool release_shfl(Run* r, unsigned w, Lane* L, unsigned cnt, unsigned live) {
    for (unsigned i = 0; i < cnt; ++i) {
        if (!((live >> i) & 1u)) continue;
        Lane& l = L[i];
        const int src = shfl_src<Op>(i, l.arg, l.width);
        if (!((live >> src) & 1u)) {
            fail(r, "warp %u: shuffle on line %d reads lane %d, which is not live", w, l.line,
                 src);
            return false;
        }
        l.result = L[src].val;
        l.state = State::Ready;
    }
    return true;
}

// Resolves warp w's collective if every live lane waits at it. Returns true if released.
inline bool resolve_warp(Run* r, unsigned w) {
    const unsigned lo = w * 32, cnt = (lo + 32 < r->nlanes ? lo + 32 : r->nlanes) - lo;
    Lane* const L = r->lanes + lo;
    // One pass: the live lanes and the first lane (if any) that waits at another collective
    // than the lowest waiting lane does. It is reported only once every live lane is known to
    // wait at a collective, as the checks below come in that order.
    unsigned live = 0;
    const Lane* first = nullptr;
    int other = -1;
    for (unsigned i = 0; i < cnt; ++i) {
        const Lane& l = L[i];
        if (l.state == State::Done) continue;
        // A live lane at a block barrier (after a round no lane is Ready): not released; the
        // block-level check reports the deadlock if nothing else releases it.
        if (l.state != State::AtWarp) return false;
        live |= 1u << i;
        if (!first) {
            first = &l;
        } else if (other < 0 &&
                   (l.op != first->op || l.line != first->line || l.mask != first->mask)) {
            other = (int)i;
        }
    }
    if (!live) return false;
    if (other >= 0) {
        fail(r, "warp %u diverged: lane %u waits at a collective on line %d, lane %u on "
                "line %d",
             w, first->linear - lo, first->line, (unsigned)other, L[other].line);
        return false;
    }
    if (first->mask != live) {
        fail(r, "warp %u: collective on line %d has mask 0x%08x but the live lanes are 0x%08x "
                "(a lane named in the mask has exited or does not exist)",
             w, first->line, first->mask, live);
        return false;
    }
    // The predicates of __any/__all/__ballot_sync (no branch: a shuffle's value is arbitrary).
    const auto preds = [&] {
        unsigned bits = 0;
        for (unsigned i = 0; i < cnt; ++i) bits |= (unsigned)(L[i].val != 0) << i;
        return bits & live;
    };
    uint64_t same = 0;  // the result of a collective whose result every lane shares
    switch (first->op) {
        case OpShflIdx: return release_shfl<OpShflIdx>(r, w, L, cnt, live);
        case OpShflUp: return release_shfl<OpShflUp>(r, w, L, cnt, live);
        case OpShflDown: return release_shfl<OpShflDown>(r, w, L, cnt, live);
        case OpShflXor: return release_shfl<OpShflXor>(r, w, L, cnt, live);
        case OpMatchAny: {
            // Lanes grouped by value, each group found once (not one scan per lane).
            for (unsigned todo = live; todo;) {
                const uint64_t v = L[__builtin_ctz(todo)].val;
                unsigned m = 0;
                for (unsigned t = todo; t; t &= t - 1) {
                    const unsigned j = __builtin_ctz(t);
                    if (L[j].val == v) m |= 1u << j;
                }
                for (unsigned t = m; t; t &= t - 1) {
                    Lane& l = L[__builtin_ctz(t)];
                    l.result = m;
                    l.state = State::Ready;
                }
                todo &= ~m;
            }
            return true;
        }
        case OpAny: same = preds() != 0; break;
        case OpAll: same = preds() == live; break;
        case OpBallot: same = preds(); break;
        default: same = 0; break;  // __syncwarp
    }
    for (unsigned i = 0; i < cnt; ++i) {
        if (!((live >> i) & 1u)) continue;
        L[i].result = same;
        L[i].state = State::Ready;
    }
    return true;
}

// Runs one block to completion (or failure). The lanes' `linear` and `tid` are set per launch.
inline void run_block(Run* r, Rng& g, unsigned* order, unsigned* worder) {
    const unsigned n = r->nlanes, nwarps = (n + 31) / 32;
    for (unsigned i = 0; i < n; ++i) {
        Lane& l = r->lanes[i];
        l.state = State::Ready;
        l.result = 0;
        lane_init(r, i);
    }
    for (unsigned w = 0; w < nwarps; ++w) worder[w] = w;
    for (;;) {
        shuffle(worder, nwarps, g);
        for (unsigned wi = 0; wi < nwarps && !r->failed; ++wi) {
            const unsigned w = worder[wi];
            const unsigned lo = w * 32, cnt = (lo + 32 < n ? lo + 32 : n) - lo;
            for (;;) {
                Lane* head = link_round(r->lanes + lo, cnt, g, order);
                if (head) run_round(r, head);
                if (r->failed || !resolve_warp(r, w)) break;
            }
        }
        if (r->failed) return;
        // Every lane now waits at a block barrier or a collective, or has returned. One pass
        // also finds the first lane at another barrier line than the lowest waiting lane's,
        // reported (as divergence) only if there is no deadlock to report first.
        unsigned live = 0, at_block = 0, count = 0;
        const Lane* first = nullptr;
        const Lane* other = nullptr;
        for (unsigned i = 0; i < n; ++i) {
            const Lane& l = r->lanes[i];
            if (l.state == State::Done) continue;
            ++live;
            if (l.state == State::AtBlock) {
                ++at_block;
                if (!first)
                    first = &l;
                else if (!other && l.line != first->line)
                    other = &l;
                if (l.val) ++count;
            }
        }
        if (live == 0) return;
        if (at_block != live) {
            fail(r, "deadlock: %u of %u live threads wait at __syncthreads (line %d), the "
                    "others at a warp collective their warp cannot complete",
                 at_block, live, first ? first->line : -1);
            return;
        }
        if (other) {
            fail(r, "barrier divergence: threads wait at __syncthreads on line %d and on "
                    "line %d",
                 first->line, other->line);
            return;
        }
        for (unsigned i = 0; i < n; ++i) {
            Lane& l = r->lanes[i];
            if (l.state != State::AtBlock) continue;
            switch (l.op) {
                case 1: l.result = count; break;             // __syncthreads_count
                case 2: l.result = count == live; break;     // __syncthreads_and
                case 3: l.result = count != 0; break;        // __syncthreads_or
                default: l.result = 0; break;
            }
            l.state = State::Ready;
        }
    }
}

struct LaunchConfig {
    unsigned grid[3];
    unsigned block[3];
    uint64_t seed;
};

// The stack arena is kept between launches (launches of a module are serialised).
inline unsigned char* g_arena = nullptr;
inline size_t g_arena_lanes = 0, g_arena_stack = 0;
inline Lane* g_lanes = nullptr;
inline std::mutex g_launch_mutex;

// Bytes per lane: the guard page, the stack, and a page that keeps the slots from being a
// power of two apart (see stack_color).
inline size_t stack_bytes() {
#ifdef GS_EMU_ASAN
    return ((size_t)1 << 20) + 4096;
#else
    return ((size_t)128 << 10) + 4096;
#endif
}

inline bool ensure_arena(unsigned lanes, char* err, size_t errlen) {
    const size_t ss = stack_bytes();
    if (g_arena && g_arena_lanes >= lanes && g_arena_stack == ss) return true;
    if (g_arena) munmap(g_arena, g_arena_lanes * g_arena_stack);
    delete[] g_lanes;
    g_arena = nullptr;
    g_lanes = nullptr;
    void* p = mmap(nullptr, lanes * ss, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %zu bytes of fiber stacks", lanes * ss);
        return false;
    }
    g_arena = (unsigned char*)p;
    for (unsigned i = 0; i < lanes; ++i) mprotect(g_arena + i * ss, 4096, PROT_NONE);
    g_arena_lanes = lanes;
    g_arena_stack = ss;
    g_lanes = new Lane[lanes];
    return true;
}

// Runs a whole grid. Returns 0, or 1 with a message in err.
inline int run_grid(const char* kernel, const LaunchConfig* c, void (*body)(void*), void* ctx,
                    char* err, size_t errlen) {
    std::lock_guard<std::mutex> guard(g_launch_mutex);
    const unsigned lanes = c->block[0] * c->block[1] * c->block[2];
    if (lanes == 0 || lanes > 1024 || c->grid[0] == 0 || c->grid[1] == 0 || c->grid[2] == 0) {
        snprintf(err, errlen, "%s: invalid launch: grid (%u,%u,%u), block (%u,%u,%u)", kernel,
                 c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2]);
        return 1;
    }
    if (!ensure_arena(lanes, err, errlen)) return 1;
    Run r;
    r.kernel = kernel;
    r.block_dim = dim3{c->block[0], c->block[1], c->block[2]};
    r.grid_dim = dim3{c->grid[0], c->grid[1], c->grid[2]};
    r.lanes = g_lanes;
    r.nlanes = lanes;
    r.body = body;
    r.body_ctx = ctx;
    r.stacks = g_arena;
    r.stack_size = g_arena_stack;
    r.err = err;
    r.errlen = errlen;
    // Thread indices depend on the block's shape only: set once per launch, not per block.
    for (unsigned i = 0; i < lanes; ++i) {
        Lane& l = g_lanes[i];
        l.linear = i;
        l.tid.x = i % c->block[0];
        l.tid.y = (i / c->block[0]) % c->block[1];
        l.tid.z = i / (c->block[0] * c->block[1]);
    }
    Rng g{c->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull};
    unsigned order[32];
    unsigned worder[32];
    const uint64_t blocks = (uint64_t)c->grid[0] * c->grid[1] * c->grid[2];
    // Blocks in a shuffled order: a kernel must not depend on which block runs first.
    // (A full permutation of ~10⁶ blocks costs more than it finds; a random rotation and
    // direction per launch exercise the order cheaply.)
    const uint64_t start = blocks > 1 ? g.next() % blocks : 0;
    const bool backwards = (g.next() & 1) != 0;
    Run* saved_run = g_run;
    Lane* saved_cur = g_cur;
    g_run = &r;
    for (uint64_t k = 0; k < blocks && !r.failed; ++k) {
        const uint64_t b = backwards ? (start + blocks - k) % blocks : (start + k) % blocks;
        r.block_idx.x = (unsigned)(b % c->grid[0]);
        r.block_idx.y = (unsigned)((b / c->grid[0]) % c->grid[1]);
        r.block_idx.z = (unsigned)(b / ((uint64_t)c->grid[0] * c->grid[1]));
        run_block(&r, g, order, worder);
    }
    g_run = saved_run;
    g_cur = saved_cur;
    return r.failed ? 1 : 0;
}

template <typename... A, size_t... I>
inline void invoke(void (*k)(A...), void** args, std::index_sequence<I...>) {
    k(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}

template <typename... A>
struct Call {
    void (*k)(A...);
    void** args;
    static void run(void* self) {
        Call* c = static_cast<Call*>(self);
        invoke(c->k, c->args, std::index_sequence_for<A...>{});
    }
};

// What each launch argument is, as the device layer passes it (the order of src/device's
// `KernelArg` variants). cuLaunchKernel reads sizeof(parameter) bytes behind each pointer and
// trusts the list blindly: a missing argument or a float where an integer belongs is
// undefined behaviour on a GPU, so the emulation checks the list against the signature.
enum ArgKind : int { ArgPtr = 0, ArgU32 = 1, ArgU64 = 2, ArgF32 = 3, ArgF64 = 4, ArgOther = -1 };

template <typename T>
constexpr int arg_kind() {
    using U = std::remove_cv_t<std::remove_reference_t<T>>;
    if constexpr (std::is_pointer_v<U>) {
        return ArgPtr;
    } else if constexpr (std::is_floating_point_v<U>) {
        return sizeof(U) == 4 ? ArgF32 : sizeof(U) == 8 ? ArgF64 : ArgOther;
    } else if constexpr (std::is_integral_v<U> || std::is_enum_v<U>) {
        // Signed or not: the layer passes integers as 32- or 64-bit slots.
        return sizeof(U) == 4 ? ArgU32 : sizeof(U) == 8 ? ArgU64 : ArgOther;
    } else {
        return ArgOther;
    }
}

inline const char* arg_kind_name(int k) {
    switch (k) {
        case ArgPtr: return "a pointer";
        case ArgU32: return "a 32-bit integer";
        case ArgU64: return "a 64-bit integer";
        case ArgF32: return "a float";
        case ArgF64: return "a double";
        default: return "a type the device layer cannot pass";
    }
}

template <typename... A>
inline bool check_args(const char* name, const unsigned char* kinds, size_t nargs, char* err,
                       size_t errlen) {
    constexpr size_t n = sizeof...(A);
    constexpr int want[n + 1] = {arg_kind<A>()..., ArgOther};
    if (nargs != n) {
        snprintf(err, errlen, "%s takes %zu parameters but the launch passed %zu arguments",
                 name, n, nargs);
        return false;
    }
    for (size_t i = 0; i < n; ++i) {
        if (want[i] != (int)kinds[i]) {
            snprintf(err, errlen, "%s: parameter %zu is %s but the launch passed %s", name, i,
                     arg_kind_name(want[i]), arg_kind_name((int)kinds[i]));
            return false;
        }
    }
    return true;
}

// What a driver that is handed only `void**` (cuLaunchKernel's contract) must know to copy the
// arguments at launch time: each parameter's kind and size, from the kernel's own signature.
// Returns the number of parameters; fills at most `max` entries.
template <typename... A>
inline size_t describe(void (*)(A...), unsigned char* kinds, unsigned* sizes, size_t max) {
    constexpr size_t n = sizeof...(A);
    constexpr int k[n + 1] = {arg_kind<A>()..., ArgOther};
    constexpr unsigned z[n + 1] = {
        (unsigned)sizeof(std::remove_cv_t<std::remove_reference_t<A>>)..., 0u};
    for (size_t i = 0; i < n && i < max; ++i) {
        kinds[i] = (unsigned char)k[i];
        sizes[i] = z[i];
    }
    return n;
}

// The generated `gs_emu_launch_<entry>` wrappers call this with the kernel function itself,
// so the argument types come from the kernel's own signature.
template <typename... A>
inline int launch(const char* name, void (*k)(A...), const LaunchConfig* c, void** args,
                  const unsigned char* kinds, size_t nargs, char* err, size_t errlen) {
    if (!check_args<A...>(name, kinds, nargs, err, errlen)) return 1;
    Call<A...> call{k, args};
    return run_grid(name, c, &Call<A...>::run, &call, err, errlen);
}

}  // namespace gs_emu

// ---- barriers and warp collectives -------------------------------------------------------------
inline void __syncthreads(int line = __builtin_LINE()) {
    gs_emu::wait_at(gs_emu::State::AtBlock, 0, line, 0, 0, 0, 32);
}
inline int __syncthreads_count(int pred, int line = __builtin_LINE()) {
    return (int)gs_emu::wait_at(gs_emu::State::AtBlock, 1, line, 0, pred != 0, 0, 32);
}
inline int __syncthreads_and(int pred, int line = __builtin_LINE()) {
    return (int)gs_emu::wait_at(gs_emu::State::AtBlock, 2, line, 0, pred != 0, 0, 32);
}
inline int __syncthreads_or(int pred, int line = __builtin_LINE()) {
    return (int)gs_emu::wait_at(gs_emu::State::AtBlock, 3, line, 0, pred != 0, 0, 32);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
    gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpSyncWarp, line, mask, 0, 0, 32);
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, int line = __builtin_LINE()) {
    return gs_emu::from_bits<T>(gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpShflIdx, line,
                                                mask, gs_emu::to_bits(v), src, width));
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32,
                        int line = __builtin_LINE()) {
    return gs_emu::from_bits<T>(gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpShflUp, line,
                                                mask, gs_emu::to_bits(v), (int)d, width));
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32,
                          int line = __builtin_LINE()) {
    return gs_emu::from_bits<T>(gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpShflDown, line,
                                                mask, gs_emu::to_bits(v), (int)d, width));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32, int line = __builtin_LINE()) {
    return gs_emu::from_bits<T>(gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpShflXor, line,
                                                mask, gs_emu::to_bits(v), m, width));
}
inline int __any_sync(unsigned mask, int pred, int line = __builtin_LINE()) {
    return (int)gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpAny, line, mask, pred != 0, 0,
                                32);
}
inline int __all_sync(unsigned mask, int pred, int line = __builtin_LINE()) {
    return (int)gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpAll, line, mask, pred != 0, 0,
                                32);
}
inline unsigned __ballot_sync(unsigned mask, int pred, int line = __builtin_LINE()) {
    return (unsigned)gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpBallot, line, mask,
                                     pred != 0, 0, 32);
}
template <typename T>
inline unsigned __match_any_sync(unsigned mask, T v, int line = __builtin_LINE()) {
    return (unsigned)gs_emu::wait_at(gs_emu::State::AtWarp, gs_emu::OpMatchAny, line, mask,
                                     gs_emu::to_bits(v), 0, 32);
}

// ---- atomics (one host thread runs every block: plain read-modify-write) ------------------------
template <typename T>
inline T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
template <typename T>
inline T atomicSub(T* p, T v) {
    const T old = *p;
    *p = old - v;
    return old;
}
template <typename T>
inline T atomicMax(T* p, T v) {
    const T old = *p;
    if (v > old) *p = v;
    return old;
}
template <typename T>
inline T atomicMin(T* p, T v) {
    const T old = *p;
    if (v < old) *p = v;
    return old;
}
template <typename T>
inline T atomicExch(T* p, T v) {
    const T old = *p;
    *p = v;
    return old;
}
template <typename T>
inline T atomicCAS(T* p, T compare, T v) {
    const T old = *p;
    if (old == compare) *p = v;
    return old;
}

// ---- integer and bit intrinsics ----------------------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline int __clzll(unsigned long long x) { return x ? __builtin_clzll(x) : 64; }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline unsigned __float_as_uint(float f) { return gs_emu::from_bits<unsigned>(gs_emu::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return gs_emu::from_bits<float>(gs_emu::to_bits(u)); }
inline int __float_as_int(float f) { return gs_emu::from_bits<int>(gs_emu::to_bits(f)); }
inline float __int_as_float(int i) { return gs_emu::from_bits<float>(gs_emu::to_bits(i)); }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }

// CUDA's 16-byte vector. A GPU faults on a 16-byte load or store at an address that is not
// 16-byte aligned: copying one to or from such an address is an error here (the launch fails,
// naming the kernel, the block and the address). Declared without CUDA's alignas(16) on
// purpose: with it the host compiler would use aligned SSE moves, and a misaligned one would
// crash the process before the check could report it.
struct float4 {
    float x, y, z, w;
    float4() = default;
    float4(float x_, float y_, float z_, float w_) : x(x_), y(y_), z(z_), w(w_) {}
    float4(const float4& o) : x(o.x), y(o.y), z(o.z), w(o.w) { gs_emu_check_align(&o); }
    float4& operator=(const float4& o) {
        gs_emu_check_align(this);
        gs_emu_check_align(&o);
        x = o.x;
        y = o.y;
        z = o.z;
        w = o.w;
        return *this;
    }
    static void gs_emu_check_align(const void* p) {
        if ((uintptr_t)p % 16 != 0)
            gs_emu::fail(gs_emu::g_run, "misaligned 16-byte access at %p (a float4 load or store)",
                         p);
    }
};
inline float4 make_float4(float x, float y, float z, float w) { return float4(x, y, z, w); }

// The rasterizers' e^x (raster.cuh's GS_RASTER_EXP): the CPU rasterizer's exp_lanes_f32
// (src/scene/real.rs), operation for operation, so that both compute the same bits. On a GPU
// GS_RASTER_EXP is CUDA's expf.
inline float gs_emu_raster_exp(float x) {
    const float lo = -87.3f, hi = 88.3f;
    const float round = 12582912.0f;  // 1.5·2^23
    const float ln2_hi = 0.693359375f, ln2_lo = -2.1219444e-4f;
    const float p_coef[6] = {1.9875691e-4f, 1.3981999e-3f, 8.333452e-3f,
                             4.1665796e-2f, 1.6666666e-1f, 0.5f};
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    const float shifted = x * 1.44269504088896340736f + round;
    const float n = shifted - round;
    const float r = (x - n * ln2_hi) - n * ln2_lo;
    float p = p_coef[0];
    for (int i = 1; i < 6; ++i) p = p * r + p_coef[i];
    const float e_r = p * (r * r) + r + 1.0f;
    uint32_t shifted_bits, round_bits;
    memcpy(&shifted_bits, &shifted, 4);
    memcpy(&round_bits, &round, 4);
    const uint32_t two_n_bits = (shifted_bits - round_bits + 127u) << 23;
    float two_n;
    memcpy(&two_n, &two_n_bits, 4);
    return e_r * two_n;
}
#define GS_RASTER_EXP gs_emu_raster_exp

#endif  // GS_HOST_EMULATION_H
