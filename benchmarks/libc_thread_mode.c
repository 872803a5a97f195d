/* What the C library's multi-thread mode costs malloc/free, without Python or SQLite.
 *
 * Build and run:  gcc -O2 benchmarks/libc_thread_mode.c -o /tmp/libc_thread_mode && /tmp/libc_thread_mode
 *
 * glibc (2.32 and later) keeps __libc_single_threaded true until the process creates its first
 * thread, and never sets it back; while it is true, malloc and free skip their atomic
 * operations and arena locks. The same allocation loop is timed three times before a thread
 * is created and joined, and three times after (docs/performance.md, "What a thread costs").
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/single_threaded.h>
#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *nothing(void *arg) { return arg; }

/* 200,000 rounds of 64 blocks of 16..2015 bytes, allocated then freed (sizes SQLite asks for). */
static double allocation_loop(void) {
    void *blocks[64];
    double began = seconds();
    for (int round = 0; round < 200000; round++) {
        for (int i = 0; i < 64; i++) blocks[i] = malloc(16 + (i * 37) % 2000);
        for (int i = 0; i < 64; i++) free(blocks[i]);
    }
    return seconds() - began;
}

int main(void) {
    for (int k = 0; k < 3; k++) printf("single-threaded=%d  %.3f s\n", __libc_single_threaded, allocation_loop());
    pthread_t thread;
    pthread_create(&thread, NULL, nothing, NULL);
    pthread_join(thread, NULL);
    for (int k = 0; k < 3; k++) printf("single-threaded=%d  %.3f s\n", __libc_single_threaded, allocation_loop());
    return 0;
}
