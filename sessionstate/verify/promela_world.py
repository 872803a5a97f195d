"""The world around the pairs in the SPIN model, written once by hand in Promela.

Queues and wakes, the ghosts' bookkeeping, the state invariants, the environment's actions
(events of every kind class, drains, restart, prune, reset, delete, watch and unwatch, attach,
the pump's sweep, the window's end) and the turn, clock and pump processes.
``promela.generate`` places it after the generated table, kinds and configuration; the
simulation replay (``spinworld.py``) holds it to the real gateway.
"""

WORLD = r"""
/* queues and wakes (R5, R12, R19, R23, R26) */
#define QI(q, p) ((q) * NPAIRS + (p))
/* R12, R26: the one wake decision: a main-style watcher's line asks for a wake unless its pair is ambient */
#define ASKS_WAKE(p) ((MAIN[WI[p]] || MUT_WAKE_SUBAGENTS) && (!AMB[p] || MUT_AMBIENT_WAKES) && !MUT_NEVER_WAKE)
#define HELD_NEW(q, w) ((WI[0] == (w) && qtext[QI(q, 0)] != 0 && qnew[QI(q, 0)]) || \
                        (WI[1] == (w) && qtext[QI(q, 1)] != 0 && qnew[QI(q, 1)]) || \
                        (WI[2] == (w) && qtext[QI(q, 2)] != 0 && qnew[QI(q, 2)]))
/* process q wakes w for the line of pair `cause`; only q's own lines count as woken (R12, R23) */
inline wake(w, q, cause) {
  assert(MAIN[w]);         /* R12: a sub-agent watcher is never woken */
  assert(!AMB[cause]);     /* INV12 (R26): no wake is ever sent for an ambient pair's notice */
  assert(!gwoken[w]);      /* WAKE1: one wake per window, in all processes together (R23), on its own ghost */
  gwoken[w] = 1;
  if :: !MUT_WAKE_KEEPS_WINDOW_OPEN -> inwin[w] = 1 :: else -> skip fi; turn_due[w] = 1;
  for (p2 : 0 .. NPAIRS - 1) { if :: WI[p2] == w -> qnew[QI(q, p2)] = 0; gnew[QI(q, p2)] = 0 :: else -> skip fi };
  p2 = 0;
  printf("@WAKE %d %d\n", w, q)
}
inline notice_wake(q, ep) {
  if
  :: ASKS_WAKE(ep) ->
     if
     :: !inwin[WI[ep]] -> wake(WI[ep], q, ep)
     :: else ->
        if
        :: !MUT_FORGET_OWED_WAKE ->
           assert(!AMB[ep]);  /* INV12 (R26): nor is a wake owed for one */
           owe[(q) * 2 + WI[ep]] = 1
        :: else -> skip
        fi
     fi
  :: else -> skip  /* a sub-agent's or an ambient pair's line: queued, nothing else */
  fi
}
inline enqueue(ep, q, since) {
  assert(since == L[ep]);  /* INV4: a notice says changesSince L */
  if
  :: qtext[QI(q, ep)] == since + 1 -> skip  /* R5: already held */
  :: else -> qtext[QI(q, ep)] = since + 1; qnew[QI(q, ep)] = ASKS_WAKE(ep); gnew[QI(q, ep)] = GWAKES[ep];
             notice_wake(q, ep)
  fi
}
inline offer(ep, q, since) {  /* R19: queued only where the watcher is served */
  if :: claim[WI[ep]] == q -> enqueue(ep, q, since) :: else -> skip fi
}
inline unqueue(ep, q) { qtext[QI(q, ep)] = 0; qnew[QI(q, ep)] = 0; gnew[QI(q, ep)] = 0 }
/* the ghost watermark after a drain or a sweep: the newest event still owed (what R8's
   follow-up and R11's re-materialised notice cover) */
inline refreeze(gp) {
  for (hb : 1 .. MAXSEQ) { if :: owed[gp] & (1 << hb) -> gN[gp] = hb :: else -> skip fi };
  hb = 0
}
/* no re-delivery (R8's follow-up): a delivered notice never says a changesSince below what an
   earlier delivery of the pair acknowledged */
inline delivered(gp, since) {
  assert(since >= gack[gp])
}
/* a delivered line covers the episode up to its frozen watermark */
inline deliver(gp) {
  assert(PENDING(gp) && owed[gp] != 0);  /* INV10, R17: only a pending episode is delivered */
  assert(!dlv[gp]);                      /* INV10: and by one drain only */
  delivered(gp, L[gp]);
  gack[gp] = gN[gp];
  owed[gp] = owed[gp] & ~((2 << gN[gp]) - 1);
  if :: owed[gp] == 0 -> gN[gp] = 0; dlv[gp] = 1 :: else -> refreeze(gp); dlv[gp] = 0 fi  /* R8: a follow-up episode */
}

/* state invariants, checked after every step */
inline check_state() {
  for (pc : 0 .. NPAIRS - 1) {
    derive(pc);
    assert(pruned[PT[pc]] <= head[PT[pc]]);                /* INV7 */
    assert((owed[pc] & ((2 << L[pc]) - 1)) == 0);          /* INV6: nothing acknowledged uncovered */
    assert(!watched[pc] || owed[pc] < (2 << M[pc]));       /* INV6: owed events are <= M */
    assert(watched[pc] || owed[pc] == 0);
    for (qc : 0 .. PROCS - 1) {
      if
      :: !dirty[qc] && claim[WI[pc]] == qc ->  /* INV2-INV4 in a swept, serving process (INV11) */
         assert((qtext[QI(qc, pc)] != 0) == PENDING(pc));
         assert(qtext[QI(qc, pc)] == 0 || qtext[QI(qc, pc)] == L[pc] + 1);
         assert(owed[pc] == 0 || qtext[QI(qc, pc)] != 0)  /* INV6: an owed event has its notice */
      :: !dirty[qc] && claim[WI[pc]] != qc ->
         assert(qtext[QI(qc, pc)] == 0)  /* INV11: a process that does not serve W queues nothing */
      :: else -> skip
      fi
    }
  };
  pc = 0; qc = 0
}

/* the world's actions; each runs atomically (one transaction and what follows it) */
inline event(t, a, k, q) {  /* an event of kind k on t by actor a (NONE: a human) */
  seqc++; s0 = seqc; assert(s0 > head[t]);  /* INV7 */
  head[t] = s0; evs[s0] = t; retained++;
  for (pe : 0 .. NPAIRS - 1) {
    if
    :: PT[pe] == t && watched[pe] ->
       if  /* the decision: the code's kind table (R1) and self-suppression (R2) */
       :: !NOTIFIES[k] -> tr0 = T_LOG_ONLY_EVENT
       :: NOTIFIES[k] && a == PW[pe] -> tr0 = T_SELF_EVENT
       :: else -> tr0 = T_MATERIAL_EVENT
       fi;
       fire(pe, tr0, s0);
       if  /* the ghost: what the spec's kind table says this event owes the pair */
       :: SPEC_NOTIFIES[k] && a != PW[pe] ->
          if :: owed[pe] == 0 -> gN[pe] = s0; dlv[pe] = 0 :: else -> skip fi;  /* R6: an episode freezes at its first event */
          owed[pe] = owed[pe] | (1 << s0)
       :: else -> assert(opened == NONE)  /* INV5: no self or log-only notice */
       fi;
       /* R23: a still-pending main-style watcher is woken again once its window passed (not by an ambient pair, R26) */
       if
       :: tr0 == T_MATERIAL_EVENT && opened == NONE && ASKS_WAKE(pe) && claim[WI[pe]] == q && !inwin[WI[pe]] && qtext[QI(q, pe)] != 0 ->
          wake(WI[pe], q, pe)
       :: else -> skip
       fi;
       if :: opened != NONE -> offer(pe, q, opened) :: else -> skip fi
    :: else -> skip
    fi
  };
  pe = 0; tr0 = 0;
  printf("@ACT event %d %d %d %d\n", t, a, NOTIFIES[k], q)
}
inline spawn_seed(t, a, k) {  /* R4: a kind that seeds makes its actor, the spawning parent, watch t */
  for (pe : 0 .. NPAIRS - 1) {
    if
    :: PT[pe] == t && PW[pe] == a ->
       wb = watched[pe];
       if
       :: SEEDS[k] && !watched[pe] -> fire(pe, T_SEED, head[t]); printf("@ACT watch %d\n", pe)
       :: else -> skip
       fi;
       /* R4 on the spec's kind table: a seeding kind leaves the parent watching, no other kind seeds */
       assert((SPEC_SEEDS[k] && watched[pe]) || (!SPEC_SEEDS[k] && watched[pe] == wb))
    :: else -> skip
    fi
  };
  pe = 0; wb = 0
}
inline drain(w, q) {
  for (pd : 0 .. NPAIRS - 1) {
    if
    :: WI[pd] == w && MUT_QUEUE_ONLY_DRAIN ->
       if
       :: qtext[QI(q, pd)] != 0 ->  /* MUTATION: delivers the queued line without reading the cursor */
          deliver(pd);
          unqueue(pd, q);
          fire(pd, T_DRAIN, head[PT[pd]]);
          if :: opened != NONE -> offer(pd, q, opened) :: else -> skip fi
       :: else -> skip
       fi
    :: WI[pd] == w && !MUT_QUEUE_ONLY_DRAIN && PENDING(pd) ->  /* R21: one line per pending pair, for L */
       deliver(pd);
       unqueue(pd, q);
       fire(pd, T_DRAIN, head[PT[pd]]);
       if :: opened != NONE -> offer(pd, q, opened) :: else -> skip fi
    :: WI[pd] == w && !MUT_QUEUE_ONLY_DRAIN && !PENDING(pd) ->  /* R17: stale, dropped */
       if :: MUT_REDELIVER_STALE && qtext[QI(q, pd)] != 0 -> delivered(pd, qtext[QI(q, pd)] - 1) :: else -> skip fi;
       unqueue(pd, q)
    :: else -> skip
    fi
  };
  pd = 0;
  printf("@ACT drain %d %d\n", w, q)
}
inline restart(q) {  /* the queue, the owed wakes and an in-flight wake are lost; R11's sweep */
  owe[(q) * 2] = 0; owe[(q) * 2 + 1] = 0;
  if :: claim[0] == q -> turn_due[0] = 0 :: else -> skip fi;
  if :: claim[1] == q -> turn_due[1] = 0 :: else -> skip fi;
  for (pr : 0 .. NPAIRS - 1) {
    unqueue(pr, q);
    if
    :: watched[pr] -> fire(pr, T_RESTART_SWEEP, 0); refreeze(pr); if :: opened != NONE -> offer(pr, q, opened) :: else -> skip fi
    :: else -> skip
    fi
  };
  pr = 0;
  dirty[q] = 0;
  printf("@ACT restart %d\n", q)
}
inline prune() {  /* drop the oldest retained event, raising its session's watermark (R13) */
  do :: evs[oldest] == NONE -> oldest++ :: else -> break od;
  if :: oldest > pruned[evs[oldest]] -> pruned[evs[oldest]] = oldest :: else -> skip fi;
  evs[oldest] = NONE; oldest++; retained--;
  printf("@ACT prune\n")
}
inline remove_pair(rp, tr, q) {
  if :: watched[rp] -> fire(rp, tr, 0); owed[rp] = 0; gN[rp] = 0; dlv[rp] = 0; unqueue(rp, q) :: else -> skip fi
}
inline reset(w, q) {
  for (px : 0 .. NPAIRS - 1) { if :: WI[px] == w -> remove_pair(px, T_RESET_WATCHER, q) :: else -> skip fi };
  px = 0;
  printf("@ACT reset %d %d\n", w, q)
}
inline delete(x, q) {
  for (px : 0 .. NPAIRS - 1) {
    if :: PW[px] == x || PT[px] == x -> remove_pair(px, T_DELETE_SESSION, q) :: else -> skip fi
  };
  px = 0;
  for (px : 1 .. MAXSEQ) { if :: evs[px] == x -> evs[px] = NONE; retained-- :: else -> skip fi };
  px = 0;
  live[x] = 0;
  if :: x == S_A -> turn_due[0] = 0 :: x == S_B -> turn_due[1] = 0 :: else -> skip fi;
  printf("@ACT delete %d %d\n", x, q)
}
inline watch(wp) {
  fire(wp, T_SEED, head[PT[wp]]);
  printf("@ACT watch %d\n", wp)
}
inline unwatch(wp, q) {
  fire(wp, T_UNWATCH, 0); owed[wp] = 0; gN[wp] = 0; dlv[wp] = 0; unqueue(wp, q);
  printf("@ACT unwatch %d %d\n", wp, q)
}
inline attach(w, q) {  /* R20: the last attach wins; R18: the owed notices are queued here */
  claim[w] = q;
  for (px : 0 .. NPAIRS - 1) {
    /* Every notice enters the new server's queue afresh, one it held before included: the
       wake that covered it may have been lost with the previous server (SPIN found the
       stranded notice when a held notice kept its old entry). */
    if
    :: WI[px] == w && PENDING(px) -> if :: !MUT_ATTACH_KEEPS_HELD -> qtext[QI(q, px)] = 0 :: else -> skip fi;
       enqueue(px, q, L[px])
    :: else -> skip
    fi
  };
  px = 0;
  printf("@ACT attach %d %d\n", w, q)
}
inline sweep(q) {  /* R22: the pump makes this queue what the durable cursors owe the served watchers */
  for (px : 0 .. NPAIRS - 1) {
    if
    :: claim[WI[px]] == q && PENDING(px) ->
       if :: qtext[QI(q, px)] != L[px] + 1 -> qtext[QI(q, px)] = 0; enqueue(px, q, L[px]) :: else -> skip fi
    :: else -> unqueue(px, q)
    fi
  };
  px = 0;
  dirty[q] = 0;
  printf("@ACT sweep %d\n", q)
}
/* the window passes: an owed wake falls due, and fires if this process still serves W and holds a
   waking line that entered after its own last wake of W (R12, R23) */
inline window(w) {
  inwin[w] = 0; gwoken[w] = 0;
  for (qw : 0 .. PROCS - 1) {
    if
    :: owe[qw * 2 + w] ->
       owe[qw * 2 + w] = 0;
       if
       :: claim[w] == qw && !inwin[w] && HELD_NEW(qw, w) ->
          wc = NONE;  /* the line it wakes for: an explicit pair's when there is one */
          for (wl : 0 .. NPAIRS - 1) {
            if :: WI[wl] == w && qtext[QI(qw, wl)] != 0 && qnew[QI(qw, wl)] && (wc == NONE || AMB[wc]) -> wc = wl
               :: else -> skip fi
          };
          wl = 0;
          wake(w, qw, wc); wc = 0
       :: else -> skip
       fi
    :: else -> skip
    fi
  };
  qw = 0;
  printf("@ACT window %d\n", w)
}
inline after(q) {
  /* every other process's queue may now lag the durable state until its pump sweeps (R22);
     actions of no process (log-only events, watches, prunes) change no queue and no L */
  for (qo : 0 .. PROCS - 1) { if :: qo != q && q != NONE -> dirty[qo] = 1 :: else -> skip fi };
  qo = 0;
  /* printed first, so a trail that fails the checks still shows the state it reached */
  printf("@POS %d,%d,%d,%d %d,%d,%d,%d %d,%d,%d,%d\n", watched[0], L[0], N[0], M[0],
         watched[1], L[1], N[1], M[1], watched[2], L[2], N[2], M[2]);
  check_state()
}

/* the environment: at most STEPS actions, any of them in any order */
active proctype environment() {
  load_table(); load_kinds(); load_world();
end_env:
  do
  :: atomic {
       steps < STEPS -> steps++;
       if :: qa = 0 :: PROCS == 2 -> qa = 1 fi;
       if
       :: seqc < MAXSEQ && (live[S_B] || live[S_C]) ->  /* an event of any kind (spec section 8) */
          if :: live[S_B] -> ta = S_B :: live[S_C] -> ta = S_C fi;
          pick_kind(ka);
          /* the actors: a human, or a live session (with two processes only the target's watchers,
             as the explorer: another actor acts there as a human does) */
          if
          :: aa = NONE
          :: live[S_A] && (PROCS == 1 || ta == S_B || ta == S_C) -> aa = S_A
          :: live[S_B] && (PROCS == 1 || ta == S_C) -> aa = S_B
          :: live[S_C] && PROCS == 1 -> aa = S_C
          fi;
          event(ta, aa, ka, qa);
          spawn_seed(ta, aa, ka);
          if :: !NOTIFIES[ka] -> qa = NONE :: else -> skip fi;  /* a log-only event changes no queue */
          ka = 0
       :: live[S_A] -> drain(0, qa)
       :: live[S_B] -> drain(1, qa)
       :: true -> restart(qa)
       :: retained > 0 -> prune(); qa = NONE
       :: live[S_A] -> reset(0, qa)
       :: live[S_B] -> reset(1, qa)
       :: live[S_A] -> delete(S_A, qa)
       :: live[S_B] -> delete(S_B, qa)
       :: live[S_C] -> delete(S_C, qa)
       :: live[PW[0]] && live[PT[0]] -> watch(0); qa = NONE
       :: live[PW[1]] && live[PT[1]] -> watch(1); qa = NONE
       :: live[PW[2]] && live[PT[2]] -> watch(2); qa = NONE
       :: live[PW[0]] && live[PT[0]] -> unwatch(0, qa)
       :: live[PW[1]] && live[PT[1]] -> unwatch(1, qa)
       :: live[PW[2]] && live[PT[2]] -> unwatch(2, qa)
       :: PROCS == 2 && live[S_A] -> attach(0, qa)
       :: PROCS == 2 && live[S_B] -> attach(1, qa)
       fi;
       after(qa); qa = 0; ta = 0; aa = 0
     }
  od
}
/* A woken watcher's turn drains in the process serving it (LIV2's assumption). */
active proctype turn() {
end_turn:
  do
  :: atomic { turn_due[0] && live[S_A] -> turn_due[0] = 0; qt = claim[0]; drain(0, qt); after(qt); qt = 0 }
  :: atomic { turn_due[1] && live[S_B] -> turn_due[1] = 0; qt = claim[1]; drain(1, qt); after(qt); qt = 0 }
  od
}
/* The clock: a window that has begun ends (weak fairness makes it end). */
active proctype clock() {
end_clock:
  do
  :: atomic { (inwin[0] || gwoken[0]) -> window(0); qt = NONE; after(qt) }
  :: atomic { (inwin[1] || gwoken[1]) -> window(1); qt = NONE; after(qt) }
  od
}
/* The pumps (R22): a process that lags another's commit sweeps. */
active proctype pump() {
end_pump:
  do
  :: atomic { dirty[0] -> sweep(0); qt = NONE; after(qt) }
  :: atomic { PROCS == 2 && dirty[1] -> sweep(1); qt = NONE; after(qt) }
  od
}
"""
