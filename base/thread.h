/*
 * base/thread.h: which threads of a peer may take a core from which.
 *
 * A peer's cores run the model; its other threads (control and gossip,
 * ZeroMQ's I/O, the HTTP server, streaming tokens to clients) wake up
 * for every token too. On a machine with as many busy stages as cores, a
 * woken thread of that kind preempted a stage mid-step: the step waited
 * for work that could have run on the next free core. A background
 * thread's wake-ups never preempt a running thread (Linux's SCHED_BATCH,
 * a fair share like any other thread, without wake-up preemption); a
 * compute thread keeps the default policy, so that its own wake-up (the
 * next frame of the pipeline) preempts the background ones. Elsewhere
 * both calls do nothing.
 */
#ifndef SHOAL_BASE_THREAD_H
#define SHOAL_BASE_THREAD_H

/* The calling thread becomes a background thread; threads it starts
 * afterwards inherit that. 0, or an errno. */
int shoal_thread_background(void);

/* The calling thread computes: the default policy, whatever the thread
 * that started it had (threads it starts afterwards inherit that). 0, or
 * an errno. */
int shoal_thread_compute(void);

/* Name the calling thread (up to 15 characters: `top -H`, /proc's comm,
 * debuggers); where threads have no names, nothing. */
void shoal_thread_name(const char *name);

#endif
