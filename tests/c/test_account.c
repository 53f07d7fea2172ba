/*
 * huvm: tests of the accounting (huvm_account.c): counters, gauges, conservation, trace events.
 * SPDX-License-Identifier: MIT
 */
#include "huvm_test.h"

static huvm_core_t core;

/* lent/harvested gauges equal the sums of held_bytes. */
static int conserved(const huvm_core_t *c)
{
    uint32_t a, b;

    for (a = 0; a < HUVM_MAX_GPUS; a++) {
        uint64_t lent = 0, harvested = 0;

        for (b = 0; b < HUVM_MAX_GPUS; b++) {
            lent += c->pairs[b][a].held_bytes;
            harvested += c->pairs[a][b].held_bytes;
        }
        if (lent != c->counters[a].lent_bytes || harvested != c->counters[a].harvested_bytes)
            return 0;
        if (c->counters[a].lent_peak_bytes < c->counters[a].lent_bytes)
            return 0;
    }
    return 1;
}

static const huvm_test_event_t *last_event(void)
{
    return huvm_test_event_count ? &huvm_test_events[huvm_test_event_count - 1] : NULL;
}

TEST(account_evict_peer_and_host)
{
    const huvm_test_event_t *e;

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    huvm_account_evict(&core, 0, 2, HUVM_REASON_PEER, 0, CHUNK, 0x200000);
    CHECK_EQ(core.counters[0].evict_to_peer, 1);
    CHECK_EQ(core.counters[0].bytes_to_peer, CHUNK);
    CHECK_EQ(core.counters[2].bytes_from_peer, CHUNK);
    CHECK_EQ(core.pairs[0][2].evict_chunks, 1);
    CHECK_EQ(core.pairs[0][2].held_bytes, CHUNK);
    CHECK_EQ(core.counters[2].lent_bytes, CHUNK);
    CHECK_EQ(core.counters[2].lent_peak_bytes, CHUNK);
    CHECK_EQ(core.counters[0].harvested_bytes, CHUNK);
    CHECK_EQ(core.rr_next[0], 3);
    e = last_event();
    CHECK(e && strcmp(e->name, "evict") == 0);
    CHECK_EQ(e->gpu, 0);
    CHECK_EQ(e->peer, 2);
    CHECK_EQ(e->reason, HUVM_REASON_PEER);
    CHECK_EQ(e->bytes, CHUNK);
    CHECK_EQ(e->va, 0x200000);

    huvm_account_evict(&core, 1, HUVM_DEST_HOST, HUVM_REASON_PEER_FULL, 0, CHUNK, 0);
    CHECK_EQ(core.counters[1].evict_to_host, 1);
    CHECK_EQ(core.counters[1].host_reason[HUVM_REASON_PEER_FULL], 1);
    CHECK_EQ(core.counters[1].bytes_to_host, CHUNK);
    e = last_event();
    CHECK_EQ(e->peer, HUVM_DEST_HOST);
    CHECK_EQ(e->reason, HUVM_REASON_PEER_FULL);

    /* pre-eviction: its own event name, both counters */
    huvm_account_evict(&core, 1, 3, HUVM_REASON_PEER, HUVM_EVICT_FLAG_PREEVICT, CHUNK, 0);
    huvm_account_evict(&core, 1, HUVM_DEST_HOST, HUVM_REASON_NO_PEER, HUVM_EVICT_FLAG_PREEVICT, CHUNK, 0);
    CHECK_EQ(core.counters[1].preevict_to_peer, 1);
    CHECK_EQ(core.counters[1].preevict_to_host, 1);
    CHECK_EQ(core.counters[1].evict_to_peer, 1);
    CHECK_EQ(core.counters[1].evict_to_host, 2);
    CHECK_EQ(huvm_test_trace_count("preevict"), 2);
    CHECK_EQ(huvm_test_trace_count("evict"), 2);
    CHECK(conserved(&core));
}

TEST(account_fetch_giveback_conservation)
{
    const huvm_test_event_t *e;

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, 3 * CHUNK, 0);
    huvm_account_evict(&core, 2, 1, HUVM_REASON_PEER, 0, 2 * CHUNK, 0);
    CHECK_EQ(core.counters[1].lent_bytes, 5 * CHUNK);
    CHECK_EQ(core.counters[1].lent_peak_bytes, 5 * CHUNK);
    CHECK_EQ(core.counters[0].evict_to_peer, 3);

    huvm_account_fetch(&core, 0, 1, 0, CHUNK, 0x1000);
    CHECK_EQ(core.counters[0].fetch_from_peer, 1);
    CHECK_EQ(core.pairs[0][1].fetch_chunks, 1);
    CHECK_EQ(core.pairs[0][1].held_bytes, 2 * CHUNK);
    CHECK_EQ(core.counters[1].bytes_to_peer, CHUNK);
    CHECK_EQ(core.counters[0].bytes_from_peer, CHUNK);
    e = last_event();
    CHECK(strcmp(e->name, "fetch") == 0);
    CHECK_EQ(e->reason, 0);
    CHECK(conserved(&core));

    huvm_account_fetch(&core, 0, 1, 1, CHUNK, 0);          /* remote map: data stays */
    CHECK_EQ(core.counters[0].remote_map, 1);
    CHECK_EQ(core.pairs[0][1].held_bytes, 2 * CHUNK);
    CHECK_EQ(last_event()->reason, 1);
    huvm_account_fetch(&core, 0, HUVM_DEST_HOST, 1, CHUNK, 0);  /* from host: remote_map ignored */
    CHECK_EQ(core.counters[0].fetch_from_host, 1);
    CHECK_EQ(core.counters[0].bytes_from_host, CHUNK);
    CHECK_EQ(last_event()->reason, 0);

    huvm_account_giveback(&core, 1, 2, CHUNK, 0x3000);
    CHECK_EQ(core.counters[1].giveback, 1);
    CHECK_EQ(core.pairs[2][1].giveback_chunks, 1);
    CHECK_EQ(core.pairs[2][1].held_bytes, CHUNK);
    CHECK_EQ(core.counters[1].bytes_to_host, CHUNK);
    e = last_event();
    CHECK(strcmp(e->name, "giveback") == 0);
    CHECK_EQ(e->gpu, 1);
    CHECK_EQ(e->peer, 2);
    CHECK_EQ(e->reason, HUVM_REASON_GIVEBACK);
    CHECK(conserved(&core));

    /* more than held: gauges saturate at zero, and stay conserved */
    huvm_account_giveback(&core, 1, 2, 10 * CHUNK, 0);
    CHECK_EQ(core.pairs[2][1].held_bytes, 0);
    CHECK_EQ(core.counters[2].harvested_bytes, 0);
    CHECK_EQ(core.counters[1].lent_bytes, 2 * CHUNK);
    CHECK(conserved(&core));
    huvm_account_fetch(&core, 0, 1, 0, 7 * CHUNK, 0);
    CHECK_EQ(core.counters[1].lent_bytes, 0);
    CHECK_EQ(core.counters[1].lent_peak_bytes, 5 * CHUNK);
    CHECK(conserved(&core));
}

/* The kernel's page-level fetches: UVM migrates pages, not chunks. Pages from a peer count bytes only (the
 * peer still holds the chunk); the chunk's release counts the chunk and the gauges, no bytes again; pages
 * from host count their bytes and the whole chunks among them. */
TEST(account_fetch_pages_then_release)
{
    const huvm_test_event_t *e;

    fx_node(&core, 2, 16 * GIB, HUVM_PRESET_HUVM);
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, CHUNK, 0x200000);

    huvm_account_fetch(&core, 0, 1, HUVM_FETCHED_PAGES, 64 * 1024, 0x210000);
    CHECK_EQ(core.counters[0].bytes_from_peer, 64 * 1024);
    CHECK_EQ(core.counters[1].bytes_to_peer, 64 * 1024);            /* the holder sent them */
    CHECK_EQ(core.counters[0].fetch_from_peer, 0);
    CHECK_EQ(core.pairs[0][1].held_bytes, CHUNK);
    CHECK_EQ(core.counters[1].lent_bytes, CHUNK);
    e = last_event();
    CHECK(strcmp(e->name, "fetch") == 0);
    CHECK_EQ(e->reason, HUVM_FETCHED_PAGES);
    CHECK_EQ(e->bytes, 64 * 1024);
    CHECK_EQ(e->va, 0x210000);

    huvm_account_fetch(&core, 0, 1, HUVM_FETCHED_PAGES, CHUNK - 64 * 1024, 0x200000);
    huvm_account_fetch(&core, 0, 1, HUVM_FETCHED_RELEASED, CHUNK, 0x200000);
    CHECK_EQ(core.counters[0].bytes_from_peer, CHUNK);         /* not twice */
    CHECK_EQ(core.counters[0].fetch_from_peer, 1);
    CHECK_EQ(core.pairs[0][1].fetch_chunks, 1);
    CHECK_EQ(core.pairs[0][1].held_bytes, 0);
    CHECK_EQ(core.counters[1].lent_bytes, 0);
    CHECK_EQ(last_event()->reason, HUVM_FETCHED_RELEASED);
    CHECK(conserved(&core));

    huvm_account_fetch(&core, 1, HUVM_DEST_HOST, HUVM_FETCHED_PAGES, 4096, 0);
    CHECK_EQ(core.counters[1].bytes_from_host, 4096);
    CHECK_EQ(core.counters[1].fetch_from_host, 0);              /* a page is not a chunk */
    huvm_account_fetch(&core, 1, HUVM_DEST_HOST, HUVM_FETCHED_PAGES, 2 * CHUNK, 0);
    CHECK_EQ(core.counters[1].fetch_from_host, 2);
    CHECK_EQ(last_event()->reason, HUVM_FETCHED_PAGES);
    huvm_account_fetch(&core, 1, HUVM_DEST_HOST, HUVM_FETCHED_RELEASED, CHUNK, 0);   /* host: as moved */
    CHECK_EQ(core.counters[1].fetch_from_host, 3);
    CHECK_EQ(last_event()->reason, HUVM_FETCHED_MOVED);

    /* an unknown mode changes nothing */
    {
        uint64_t asserts = huvm_port_assert_failures;

        huvm_account_fetch(&core, 0, 1, HUVM_FETCHED_COUNT, CHUNK, 0);
        CHECK_EQ(huvm_port_assert_failures - asserts, 1);
    }
    CHECK_EQ(core.counters[0].bytes_from_peer, CHUNK);
    CHECK(conserved(&core));
}

TEST(account_release_gauges_only)
{
    static huvm_core_t before;
    uint64_t asserts;
    uint32_t g, h;

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, 3 * CHUNK, 0);
    huvm_account_prefetch(&core, 0, 2, 2 * CHUNK, 0);
    huvm_account_evict(&core, 3, 1, HUVM_REASON_PEER, 0, CHUNK, 0);
    huvm_test_trace_reset();
    memcpy(&before, &core, sizeof(core));

    /* GPU 0 frees one chunk that sits on GPU 1: only held/lent/harvested go down */
    huvm_account_release(&core, 0, 1, CHUNK, 0x400000);
    CHECK_EQ(core.pairs[0][1].held_bytes, 2 * CHUNK);
    CHECK_EQ(core.counters[1].lent_bytes, 3 * CHUNK);             /* 2 of GPU 0 + 1 of GPU 3 */
    CHECK_EQ(core.counters[0].harvested_bytes, 4 * CHUNK);        /* 2 on GPU 1 + 2 on GPU 2 */
    CHECK_EQ(core.counters[1].lent_peak_bytes, 4 * CHUNK);        /* the peak is history */
    CHECK(conserved(&core));
    CHECK_EQ(huvm_test_event_count, 0);                           /* nothing moved: no event */
    /* every counter (not the gauges) is unchanged */
    for (g = 0; g < HUVM_MAX_GPUS; g++) {
        huvm_gpu_counters_t a = core.counters[g], b = before.counters[g];

        a.lent_bytes = b.lent_bytes = 0;
        a.harvested_bytes = b.harvested_bytes = 0;
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
        for (h = 0; h < HUVM_MAX_GPUS; h++) {
            huvm_pair_counters_t pa = core.pairs[g][h], pb = before.pairs[g][h];

            pa.held_bytes = pb.held_bytes = 0;
            CHECK(memcmp(&pa, &pb, sizeof(pa)) == 0);
        }
    }
    /* prefetched data released too; then more than is held saturates at zero, still conserved, and leaves
     * the other owner's data on the same holder alone */
    huvm_account_release(&core, 0, 2, 2 * CHUNK, 0);
    CHECK_EQ(core.counters[2].lent_bytes, 0);
    huvm_account_release(&core, 0, 1, 100 * CHUNK, 0);
    CHECK_EQ(core.pairs[0][1].held_bytes, 0);
    CHECK_EQ(core.counters[0].harvested_bytes, 0);
    CHECK_EQ(core.counters[1].lent_bytes, CHUNK);                 /* GPU 3's chunk */
    CHECK_EQ(core.pairs[3][1].held_bytes, CHUNK);
    CHECK(conserved(&core));
    /* after a release, a later fetch or give-back of the same pair cannot take more than is held */
    huvm_account_fetch(&core, 0, 1, 0, CHUNK, 0);
    CHECK_EQ(core.counters[1].lent_bytes, CHUNK);
    CHECK(conserved(&core));

    /* bad input: ignored with an assertion, state unchanged */
    huvm_test_trace_reset();
    memcpy(&before, &core, sizeof(core));
    asserts = huvm_port_assert_failures;
    huvm_account_release(&core, 1, 1, CHUNK, 0);                  /* holder is the owner */
    huvm_account_release(&core, 9, 1, CHUNK, 0);                  /* no such owner */
    huvm_account_release(&core, 0, HUVM_DEST_HOST, CHUNK, 0);     /* host is not a holder */
    huvm_account_release(NULL, 0, 1, CHUNK, 0);
    CHECK(memcmp(&before, &core, sizeof(core)) == 0);
    CHECK_EQ(huvm_port_assert_failures - asserts, 4);
    CHECK_EQ(huvm_test_event_count, 0);
}

TEST(account_slot_in_use_until_released)
{
    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    CHECK_EQ(huvm_core_slot_in_use(&core, 0), 0);
    huvm_account_evict(&core, 0, 2, HUVM_REASON_PEER, 0, CHUNK, 0x200000);
    huvm_account_prefetch(&core, 3, 1, CHUNK, 0x400000);
    huvm_core_remove_gpu(&core, 0);                 /* gone, its chunk still on GPU 2 */
    CHECK_EQ(huvm_core_slot_in_use(&core, 0), 1);   /* the owner's index is on a chunk */
    CHECK_EQ(huvm_core_slot_in_use(&core, 2), 1);   /* the holder */
    CHECK_EQ(huvm_core_slot_in_use(&core, 1), 1);
    CHECK_EQ(huvm_core_slot_in_use(&core, 3), 1);
    huvm_account_giveback(&core, 2, 0, CHUNK, 0x200000);
    CHECK_EQ(huvm_core_slot_in_use(&core, 0), 0);   /* nothing of it left: the index may be reused */
    CHECK_EQ(huvm_core_slot_in_use(&core, 2), 0);
    huvm_account_release(&core, 3, 1, CHUNK, 0x400000);
    CHECK_EQ(huvm_core_slot_in_use(&core, 1), 0);
    CHECK_EQ(huvm_core_slot_in_use(&core, 3), 0);
    CHECK_EQ(huvm_core_slot_in_use(&core, HUVM_MAX_GPUS), 0);
    CHECK_EQ(huvm_core_slot_in_use(NULL, 0), 0);
}

TEST(account_prefetch_faults_policy)
{
    const huvm_test_event_t *e;

    fx_node(&core, 3, 16 * GIB, HUVM_PRESET_HUVM);
    huvm_account_prefetch(&core, 0, 0, 2 * CHUNK, 0);
    CHECK_EQ(core.counters[0].prefetch_local, 2);
    CHECK_EQ(core.counters[0].bytes_from_host, 2 * CHUNK);
    huvm_account_prefetch(&core, 0, 2, CHUNK, 0);
    CHECK_EQ(core.counters[0].prefetch_to_peer, 1);
    CHECK_EQ(core.pairs[0][2].prefetch_chunks, 1);
    CHECK_EQ(core.pairs[0][2].held_bytes, CHUNK);
    CHECK_EQ(core.counters[2].bytes_from_host, CHUNK);
    CHECK(conserved(&core));
    CHECK_EQ(huvm_test_trace_count("prefetch"), 2);
    huvm_account_faults(&core, 1, 200);
    huvm_account_faults(&core, 1, 56);
    CHECK_EQ(core.counters[1].faults, 256);
    CHECK_EQ(core.counters[1].fault_batches, 2);
    huvm_account_policy(&core);
    e = last_event();
    CHECK(strcmp(e->name, "policy") == 0);
    CHECK_EQ(e->reason, core.policy.preset);
    CHECK_EQ(e->bytes, core.policy.generation);
    CHECK_EQ(e->gpu, HUVM_DEST_HOST);
}

TEST(account_reset_keeps_gauges)
{
    uint32_t g, i;

    fx_node(&core, 3, 16 * GIB, HUVM_PRESET_HUVM);
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, 4 * CHUNK, 0);
    huvm_account_fetch(&core, 0, 1, 0, 2 * CHUNK, 0);
    huvm_account_evict(&core, 2, HUVM_DEST_HOST, HUVM_REASON_NO_PEER, 0, CHUNK, 0);
    huvm_account_faults(&core, 2, 5);
    huvm_account_reset(&core, 0);                           /* no flag: nothing */
    CHECK_EQ(core.counters[0].evict_to_peer, 4);
    huvm_account_reset(&core, HUVM_RESET_COUNTERS);
    for (g = 0; g < 3; g++) {
        CHECK_EQ(core.counters[g].evict_to_peer + core.counters[g].evict_to_host + core.counters[g].faults +
                 core.counters[g].fetch_from_peer + core.counters[g].bytes_to_peer, 0);
        for (i = 0; i < HUVM_REASON_COUNT; i++)
            CHECK_EQ(core.counters[g].host_reason[i], 0);
    }
    CHECK_EQ(core.pairs[0][1].evict_chunks, 0);
    CHECK_EQ(core.pairs[0][1].fetch_chunks, 0);
    CHECK_EQ(core.pairs[0][1].held_bytes, 2 * CHUNK);       /* gauges stay */
    CHECK_EQ(core.counters[1].lent_bytes, 2 * CHUNK);
    CHECK_EQ(core.counters[0].harvested_bytes, 2 * CHUNK);
    CHECK_EQ(core.counters[1].lent_peak_bytes, 2 * CHUNK);  /* peak restarts at the level */
    CHECK(conserved(&core));
}

TEST(account_bad_input_is_ignored)
{
    static huvm_core_t before;
    uint64_t asserts = huvm_port_assert_failures;

    fx_node(&core, 3, 16 * GIB, HUVM_PRESET_HUVM);
    memcpy(&before, &core, sizeof(core));
    huvm_account_evict(&core, 5, 1, HUVM_REASON_PEER, 0, CHUNK, 0);         /* no such owner */
    huvm_account_evict(&core, 0, 0, HUVM_REASON_PEER, 0, CHUNK, 0);         /* to itself */
    huvm_account_evict(&core, 0, 7, HUVM_REASON_PEER, 0, CHUNK, 0);         /* no such peer */
    huvm_account_fetch(&core, 0, 9, 0, CHUNK, 0);
    huvm_account_fetch(&core, 0, 0, 0, CHUNK, 0);
    huvm_account_giveback(&core, 1, 1, CHUNK, 0);
    huvm_account_giveback(&core, 1, 12, CHUNK, 0);
    huvm_account_prefetch(&core, 0, 12, CHUNK, 0);
    huvm_account_faults(&core, 3, 1);
    huvm_account_evict(NULL, 0, 1, 0, 0, CHUNK, 0);
    CHECK(memcmp(&before, &core, sizeof(core)) == 0);
    CHECK_EQ(huvm_test_event_count, 0);
    CHECK_EQ(huvm_port_assert_failures - asserts, 10);
    /* a host eviction claiming reason "peer" is counted as no_peer */
    huvm_account_evict(&core, 0, HUVM_DEST_HOST, HUVM_REASON_PEER, 0, CHUNK, 0);
    CHECK_EQ(core.counters[0].host_reason[HUVM_REASON_NO_PEER], 1);
    huvm_account_evict(&core, 0, HUVM_DEST_HOST, 99, 0, CHUNK, 0);
    CHECK_EQ(core.counters[0].host_reason[HUVM_REASON_NO_PEER], 2);
}
