/*
 * huvm: tests of the decisions (huvm_decide.c). SPDX-License-Identifier: MIT
 */
#include "huvm_test.h"
#include "huvm_internal.h"

#define ALL 0xffffu

static huvm_core_t core;
static huvm_gpu_state_t st[HUVM_MAX_GPUS];

/* A custom node: 4 GPUs of 16 GiB, huvm preset, the given peer choice, no reserves, no usage cap. */
static void node4(uint32_t peer_select)
{
    huvm_policy_t p;
    uint32_t i;

    fx_node(&core, 4, 16 * GIB, HUVM_PRESET_HUVM);
    p = core.policy;
    p.generation = 0;
    p.peer_select = peer_select;
    p.peer_usage_max_pct = 100;
    p.hysteresis_ms = 0;
    for (i = 0; i < p.gpu_count; i++)
        p.gpus[i].lend_reserve_bytes = 0;
    if (fx_apply(&core, &p) != HUVM_NV_OK)
        huvm_test_fail(__FILE__, __LINE__, "apply");
    fx_state(&core, st);
}

TEST(decide_stock_never_peer)
{
    huvm_evict_request_t r;
    huvm_decision_t d;
    uint32_t g;

    fx_node(&core, 8, 80 * GIB, HUVM_PRESET_STOCK);
    fx_state(&core, st);
    for (g = 0; g < 8; g++) {
        r = fx_req(g, ALL);
        d = huvm_decide_evict(&core, st, &r);
        CHECK_EQ(d.dst, HUVM_DEST_HOST);
        CHECK_EQ(d.reason, HUVM_REASON_TIER_OFF);
    }
}

TEST(decide_most_free_and_ties)
{
    huvm_evict_request_t r = fx_req(0, ALL);
    huvm_decision_t d;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.reason, HUVM_REASON_PEER);
    CHECK_EQ(d.dst, 1);                     /* all equal: lowest index */
    st[2].free_bytes += 0;
    st[1].free_bytes -= 4 * CHUNK;
    st[3].free_bytes -= 2 * CHUNK;
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 2);                     /* most free */
    r.candidates = (1u << 1) | (1u << 3);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 3);                     /* most free among the candidates */
}

TEST(decide_fewest_lent)
{
    huvm_evict_request_t r = fx_req(0, ALL);
    huvm_decision_t d;

    node4(HUVM_PEER_SELECT_FEWEST_LENT);
    huvm_account_evict(&core, 2, 1, HUVM_REASON_PEER, 0, CHUNK, 0);
    huvm_account_evict(&core, 2, 3, HUVM_REASON_PEER, 0, 2 * CHUNK, 0);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 2);                     /* 2 holds nothing */
    huvm_account_evict(&core, 1, 2, HUVM_REASON_PEER, 0, 3 * CHUNK, 0);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 1);                     /* 1: 1 chunk, 3: 2 chunks, 2: 3 chunks */
}

TEST(decide_bw_weighted)
{
    huvm_evict_request_t r = fx_req(0, ALL);
    huvm_link_t slow = { HUVM_LINK_NVLINK_4, 1, 25000 };
    huvm_link_t fast = { HUVM_LINK_NVLINK_4, 4, 100000 };
    huvm_decision_t d;

    node4(HUVM_PEER_SELECT_BW_WEIGHTED);
    huvm_core_set_link(&core, 0, 1, &slow);
    huvm_core_set_link(&core, 0, 2, &slow);
    huvm_core_set_link(&core, 0, 3, &fast);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 3);                     /* same free memory, fastest link */
    st[3].free_bytes = 3 * GIB;             /* 3 GiB x 100 < 16 GiB x 25 */
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 1);
    st[3].free_bytes = 5 * GIB;             /* 5 GiB x 100 > 16 GiB x 25 */
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 3);
}

/* The huvm preset's choice: the fastest admitted link even when a slower peer has more room (where
 * bandwidth weighting moves to the emptier, slower peer); among equal links the most free; a full fast peer
 * gives way. */
TEST(decide_fastest_link)
{
    huvm_evict_request_t r = fx_req(0, ALL);
    huvm_link_t slow = { HUVM_LINK_NVLINK_2, 1, 25000 };
    huvm_link_t fast = { HUVM_LINK_NVLINK_2, 2, 50000 };
    huvm_decision_t d;
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_FASTEST_LINK);
    huvm_core_set_link(&core, 0, 1, &slow);
    huvm_core_set_link(&core, 0, 2, &slow);
    huvm_core_set_link(&core, 0, 3, &fast);
    st[3].free_bytes = 3 * GIB;             /* bandwidth weighting: 3 x 50 < 16 x 25, so GPU 1 */
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 3);
    p = core.policy;
    p.generation = 0;
    p.peer_select = HUVM_PEER_SELECT_BW_WEIGHTED;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 1);
    p.peer_select = HUVM_PEER_SELECT_FASTEST_LINK;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[1].free_bytes = 2 * GIB;
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 3);
    st[3].free_bytes = 0;                   /* the fast peer is full: of the equal slow ones, the one */
    st[2].free_bytes = 8 * GIB;             /* lending least (a tie: the lower index), not the roomiest */
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, 1);
    CHECK_EQ(d.reason, HUVM_REASON_PEER);
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, CHUNK, 0);
    d = huvm_decide_evict(&core, st, &r);   /* GPU 1 now holds a guest chunk: GPU 2 shares the traffic */
    CHECK_EQ(d.dst, 2);
    st[3].free_bytes = 3 * GIB;             /* a faster link still wins over a less loaded one */
    huvm_account_evict(&core, 0, 3, HUVM_REASON_PEER, 0, CHUNK, 0);
    huvm_account_evict(&core, 0, 3, HUVM_REASON_PEER, 0, CHUNK, 0);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 3);
}

TEST(decide_round_robin_advances_through_accounting)
{
    huvm_evict_request_t r = fx_req(1, ALL);
    huvm_decision_t d;
    uint32_t expect[] = { 2, 3, 0, 2, 3, 0 };
    uint32_t i;

    node4(HUVM_PEER_SELECT_ROUND_ROBIN);
    core.rr_next[1] = 2;
    for (i = 0; i < 6; i++) {
        d = huvm_decide_evict(&core, st, &r);
        CHECK_EQ(d.reason, HUVM_REASON_PEER);
        CHECK_EQ(d.dst, expect[i]);
        /* a decision alone does not move the cursor: decisions are pure */
        CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, expect[i]);
        huvm_account_evict(&core, 1, d.dst, d.reason, 0, CHUNK, 0);
    }
    /* a full peer is skipped */
    st[2].free_bytes = 0;
    core.rr_next[1] = 2;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 3);
}

TEST(decide_reason_order)
{
    huvm_evict_request_t r = fx_req(0, ALL);
    huvm_decision_t d;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    r.flags = HUVM_EVICT_FLAG_PMA_CONTEXT | HUVM_EVICT_FLAG_GUEST_CHUNK;
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, HUVM_DEST_HOST);
    CHECK_EQ(d.reason, HUVM_REASON_PMA_CONTEXT);
    r.flags = HUVM_EVICT_FLAG_GUEST_CHUNK;
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.reason, HUVM_REASON_GUEST_CHUNK);
    r.flags = HUVM_EVICT_FLAG_PREEVICT;
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.reason, HUVM_REASON_PEER);
    /* a role that does not harvest: tier off, before anything else */
    fx_role(&core, 0, HUVM_ROLE_LENDER, HUVM_UNLIMITED, 0);
    r.flags = HUVM_EVICT_FLAG_PMA_CONTEXT;
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.reason, HUVM_REASON_TIER_OFF);
    /* bad GPU index */
    r = fx_req(9, ALL);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, HUVM_DEST_HOST);
    CHECK_EQ(d.reason, HUVM_REASON_NO_PEER);
}

TEST(decide_no_peer_cases)
{
    huvm_evict_request_t r = fx_req(0, 0);
    huvm_link_t pcie = { HUVM_LINK_PCIE, 0, 16000 };
    huvm_link_t none = { HUVM_LINK_NONE, 0, 0 };
    huvm_policy_t p;
    huvm_decision_t d;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    d = huvm_decide_evict(&core, st, &r);           /* no candidates */
    CHECK_EQ(d.reason, HUVM_REASON_NO_PEER);
    r.candidates = 1u << 0;                         /* only itself */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_NO_PEER);
    r.candidates = 1u << 9;                         /* beyond gpu_count */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_NO_PEER);
    r.candidates = 1u << 1;
    huvm_core_set_link(&core, 0, 1, &none);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_NO_PEER);
    huvm_core_set_link(&core, 0, 1, &pcie);         /* PCIe peer, NVLink only */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_NO_PEER);
    p = core.policy;
    p.generation = 0;
    p.nvlink_only = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    d = huvm_decide_evict(&core, st, &r);           /* PCIe peers allowed */
    CHECK_EQ(d.reason, HUVM_REASON_PEER);
    CHECK_EQ(d.dst, 1);
    r.candidates = 1u << 2;
    fx_role(&core, 2, HUVM_ROLE_HARVESTER, HUVM_UNLIMITED, 0);   /* not a lender */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_NO_PEER);
    fx_role(&core, 2, HUVM_ROLE_NONE, HUVM_UNLIMITED, 0);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_NO_PEER);
    fx_role(&core, 2, HUVM_ROLE_LENDER, HUVM_UNLIMITED, 0);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 2);
    huvm_core_remove_gpu(&core, 2);                 /* absent */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_NO_PEER);
}

TEST(decide_lend_limit_and_reserve)
{
    huvm_evict_request_t r = fx_req(0, 1u << 1);
    huvm_decision_t d;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    fx_role(&core, 1, HUVM_ROLE_BOTH, 2 * CHUNK, 0);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, 2 * CHUNK, 0);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.dst, HUVM_DEST_HOST);
    CHECK_EQ(d.reason, HUVM_REASON_PEER_FULL);      /* at the limit */
    fx_role(&core, 1, HUVM_ROLE_BOTH, 0, 0);        /* lend limit 0: lends nothing */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_PEER_FULL);
    fx_role(&core, 1, HUVM_ROLE_BOTH, HUVM_UNLIMITED, 1 * GIB);
    st[1].free_bytes = 1 * GIB + CHUNK;             /* exactly reserve + one chunk: admitted */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    st[1].free_bytes = 1 * GIB + CHUNK - 1;         /* one byte short */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_PEER_FULL);
    st[1].free_bytes = CHUNK - 1;
    fx_role(&core, 1, HUVM_ROLE_BOTH, HUVM_UNLIMITED, 0);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_PEER_FULL);
    /* free bytes above capacity (inconsistent caller) are clamped, limits never wrap */
    st[1].free_bytes = ~0ULL;
    fx_role(&core, 1, HUVM_ROLE_BOTH, HUVM_UNLIMITED - 1, 0);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
}

TEST(decide_usage_cap)
{
    huvm_evict_request_t r = fx_req(0, 1u << 1);
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.peer_usage_max_pct = 85;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    /* usage after admission at most 85%: (mem - free + chunk) * 100 <= 85 * mem */
    st[1].free_bytes = (15 * 16 * GIB + 100 * CHUNK + 99) / 100;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    st[1].free_bytes -= 1;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER_FULL);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_PEER_FULL);
}

TEST(decide_hysteresis)
{
    huvm_evict_request_t r = fx_req(0, 1u << 1);
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.hysteresis_ms = 50;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    r.now_ns = 10ULL * 1000000000ULL;
    /* the chunk came back 10 ms ago */
    r.chunk_fetched_ns = r.now_ns - 10ULL * 1000000ULL;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_HYSTERESIS);
    r.chunk_fetched_ns = r.now_ns - 50ULL * 1000000ULL;     /* exactly 50 ms: allowed */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_PEER);
    r.chunk_fetched_ns = r.now_ns + 5;                      /* from the future: recent */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_HYSTERESIS);
    r.chunk_fetched_ns = 0;                                 /* never */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    /* the peer itself evicted 1 ms ago */
    st[1].last_evict_ns = r.now_ns - 1000000ULL;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_HYSTERESIS);
    r.candidates = ALL;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 2);      /* another peer */
    /* full beats hysteresis in the reason when both happen */
    st[2].free_bytes = 0;
    st[3].free_bytes = 0;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_PEER_FULL);
    /* hysteresis 0 turns it off */
    p.hysteresis_ms = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    r.candidates = 1u << 1;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
}

/* A lender's guest-traffic budget: the window's copies, those in flight and the new one within MB/s x window. */
TEST(decide_lend_traffic_budget)
{
    huvm_evict_request_t r = fx_req(0, 1u << 1);
    huvm_policy_t p;
    uint64_t budget;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.gpus[1].lend_traffic_mbyte_per_s = 420;         /* 420 MB/s x 20 ms = 8,400,000 B: 4 chunks and a bit */
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    budget = 420ULL * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000;
    st[1].guest_traffic_bytes = budget - CHUNK;       /* exactly one chunk left: admitted */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    st[1].guest_traffic_bytes = budget - CHUNK + 1;   /* one byte short */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_LENDER_BUSY);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, HUVM_DEST_HOST);
    st[1].guest_traffic_bytes = ~0ULL - 4;            /* an absurd level never wraps into admission */
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_LENDER_BUSY);
    /* bytes in flight count as traffic */
    st[1].guest_traffic_bytes = budget - 2 * CHUNK;
    CHECK_EQ(huvm_lend_reserve(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_lend_reserve(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_LENDER_BUSY);
    huvm_lend_unreserve(&core, 1, 2 * CHUNK);
    /* another lender without a budget takes the chunk; the busy one is only the reason when none can */
    st[1].guest_traffic_bytes = budget;
    r.candidates = (1u << 1) | (1u << 2);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 2);
    /* busy is named before full: GPU 2 full, GPU 1 over its budget */
    st[2].free_bytes = 0;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_LENDER_BUSY);
    /* a full lender that is also over budget is full (capacity is checked first) */
    st[1].free_bytes = 0;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER_FULL);
    /* no budget (0): traffic does not matter */
    st[1].free_bytes = 16 * GIB;
    st[1].guest_traffic_bytes = ~0ULL;
    p.gpus[1].lend_traffic_mbyte_per_s = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
}

/* The lender bound T (lend_slowdown_max_pct) clamps a guest-traffic budget the admin set to T / (100 + T) of the
 * HBM bandwidth; it makes no budget of its own, nor without an HBM rate. */
TEST(decide_slowdown_bound_traffic)
{
    huvm_evict_request_t r = fx_req(0, 1u << 1);
    huvm_policy_t p;
    uint64_t bound = 1000000ULL * 2 / 102 * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000;   /* 19607 MB/s x 20 ms */

    node4(HUVM_PEER_SELECT_MOST_FREE);
    CHECK_EQ(huvm_core_set_gpu_rates(&core, 1, (uint32_t)HUVM_MAX_MBYTE_PER_S + 1, 0), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(huvm_core_set_gpu_rates(&core, HUVM_MAX_GPUS, 1, 1), HUVM_NV_ERR_INVALID_ARGUMENT);
    CHECK_EQ(huvm_core_set_gpu_rates(&core, 1, 1000000, 0), HUVM_NV_OK);          /* 1 TB/s of HBM */
    CHECK_EQ(huvm_policy_gpu(&core, 1)->lend_slowdown_max_pct, 2);               /* the huvm preset's T */
    /* no budget set: T makes none */
    st[1].guest_traffic_bytes = ~0ULL;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    /* a budget above T's is clamped to it */
    p = core.policy;
    p.generation = 0;
    p.gpus[1].lend_traffic_mbyte_per_s = 50000;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[1].guest_traffic_bytes = bound - CHUNK;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    st[1].guest_traffic_bytes = bound - CHUNK + 1;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_LENDER_BUSY);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_LENDER_BUSY);
    /* a smaller one stays */
    p.gpus[1].lend_traffic_mbyte_per_s = 420;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[1].guest_traffic_bytes = 420ULL * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000 - CHUNK + 1;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_LENDER_BUSY);
    p.gpus[1].lend_traffic_mbyte_per_s = 50000;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[1].guest_traffic_bytes = bound - CHUNK + 1;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_LENDER_BUSY);
    /* no bound: the explicit budget alone (50 GB/s) */
    p.gpus[1].lend_slowdown_max_pct = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    /* a bound with no HBM rate known (none set): the explicit budget alone */
    p.gpus[1].lend_slowdown_max_pct = 2;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_core_set_gpu_rates(&core, 1, 0, 0), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    /* a tiny HBM rate: never below one chunk per window */
    CHECK_EQ(huvm_core_set_gpu_rates(&core, 1, 1, 0), HUVM_NV_OK);
    st[1].guest_traffic_bytes = (uint64_t)HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000 - CHUNK;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
}

/* SET_GPU_RATES through the dispatch (the kernel's and the simulator's path): T clamps the guest-traffic budget
 * from the HBM rate the command set, and sizes lending above the peak from its give-back rate; before the
 * command (rates unknown) neither applies. */
static huvm_status_t set_rates_cmd(uint32_t gpu, uint32_t hbm, uint32_t giveback)
{
    static const huvm_caller_t admin = { .privileged = 1, .uid = 0, .pid = 1, .now_ns = 5000 };
    HUVM_SET_GPU_RATES_PARAMS c;

    memset(&c, 0, sizeof(c));
    c.hdr.abi_version = HUVM_ABI_VERSION;
    c.hdr.size = sizeof(c);
    memcpy(c.uuid, core.gpus[gpu].uuid, sizeof(c.uuid));
    c.hbm_mbyte_per_s = hbm;
    c.giveback_mbyte_per_s = giveback;
    return huvm_dispatch(&core, NULL, NULL, &admin, HUVM_IOCTL_SET_GPU_RATES, &c, sizeof(c));
}

TEST(decide_rates_from_set_gpu_rates)
{
    const uint64_t ms = HUVM_NS_PER_MS;
    huvm_evict_request_t r = fx_req(0, 1u << 1);
    huvm_policy_t p;
    uint64_t bound = 900000ULL * 2 / 102 * HUVM_LEND_TRAFFIC_WINDOW_MS * 1000;   /* V100: 17647 MB/s x 20 ms */

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.gpus[1].lend_traffic_mbyte_per_s = 50000;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_policy_gpu(&core, 1)->lend_slowdown_max_pct, 2);
    /* rates unknown: the admin's 50 GB/s budget alone */
    st[1].guest_traffic_bytes = bound - CHUNK + 1;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    /* after the command T clamps it to 900 GB/s x 2 / 102 */
    CHECK_EQ(set_rates_cmd(1, 900000, 0), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_LENDER_BUSY);
    st[1].guest_traffic_bytes = bound - CHUNK;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    /* other GPUs are not touched */
    CHECK_EQ(core.hbm_mbyte_per_s[2], 0);
    /* back to unknown (0): the budget alone again */
    CHECK_EQ(set_rates_cmd(1, 0, 0), HUVM_NV_OK);
    st[1].guest_traffic_bytes = bound - CHUNK + 1;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);

    /* lending above the peak: a measured give-back rate of 6 GB/s instead of the 16 GB/s line rate */
    st[1].guest_traffic_bytes = 0;
    st[1].free_bytes = 12 * GIB;
    st[1].own_peak_bytes = 16 * GIB;
    st[1].own_spike_ns = 1000 * ms;                        /* T = 2 %: 2/102 of a second, 19,607 us */
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 313712000, r.now_ns), HUVM_REASON_PEER);   /* x 16 GB/s */
    CHECK_EQ(set_rates_cmd(1, 0, 6000), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 117642000, r.now_ns), HUVM_REASON_PEER);   /* x 6 GB/s */
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 117642001, r.now_ns), HUVM_REASON_PEER_FULL);
    /* a refused command changes nothing */
    CHECK_EQ(set_rates_cmd(1, 0, (uint32_t)HUVM_MAX_MBYTE_PER_S + 1), HUVM_NV_ERR_OUT_OF_RANGE);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 117642001, r.now_ns), HUVM_REASON_PEER_FULL);
}

/* LEND_ABOVE_PEAK under a bound T lends the part of the lender's peak it can give back within T of its own time
 * between spikes: interval x T / (100 + T) x give-back rate (the observed interval holds the stall). */
TEST(decide_slowdown_bound_peak)
{
    const uint64_t ms = HUVM_NS_PER_MS;
    huvm_evict_request_t r = fx_req(0, 1u << 1);
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    CHECK(huvm_policy_gpu(&core, 1)->flags & HUVM_GPU_POLICY_LEND_ABOVE_PEAK);
    CHECK_EQ(huvm_core_set_gpu_rates(&core, 1, 0, 10000), HUVM_NV_OK);           /* gives back 10 GB/s */
    /* own use 4 GiB, peak the whole GPU: the room to the peak (12 GiB) is all its free memory */
    st[1].free_bytes = 12 * GIB;
    st[1].own_peak_bytes = 16 * GIB;
    /* spikes every second: T = 2 %, 2/102 of it (19,607 us; 20 ms would slow it 2.04 %), gives back 196 MB */
    st[1].own_spike_ns = 1000 * ms;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 196070000, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 196070001, r.now_ns), HUVM_REASON_PEER_FULL);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    /* spikes every 10 ms: 1.96 MB, less than a chunk: it keeps its peak free */
    st[1].own_spike_ns = 10 * ms;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 1960000, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER_FULL);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).reason, HUVM_REASON_PEER_FULL);
    /* unknown cadence (0): nothing of the peak */
    st[1].own_spike_ns = 0;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER_FULL);
    /* no give-back rate: the host link's line rate (16 GB/s): 314 MB a second */
    st[1].own_spike_ns = 1000 * ms;
    CHECK_EQ(huvm_core_set_gpu_rates(&core, 1, 0, 0), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 313712000, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 313712001, r.now_ns), HUVM_REASON_PEER_FULL);
    /* T = 10 %: 10/110 of a second's give-back (90,909 us), 1.45 GB */
    p = core.policy;
    p.generation = 0;
    p.gpus[1].lend_slowdown_max_pct = 10;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 1454544000, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 1454544001, r.now_ns), HUVM_REASON_PEER_FULL);
    /* T = 100 %: half a second's give-back (its time doubled), 8 GB of its 12 GiB free */
    p.gpus[1].lend_slowdown_max_pct = 100;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 8000000000ULL, r.now_ns), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 8000000001ULL, r.now_ns), HUVM_REASON_PEER_FULL);
    /* the longest interval weighed does not overflow: all of its free memory */
    st[1].own_spike_ns = ~0ULL;
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 12 * GIB, r.now_ns), HUVM_REASON_PEER);
    /* no bound (0): the whole peak stays free, however slow the cadence (LEND_ABOVE_PEAK as before T) */
    p.gpus[1].lend_slowdown_max_pct = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER_FULL);
    /* without LEND_ABOVE_PEAK the peak is not kept at all */
    p.gpus[1].flags &= ~(uint32_t)HUVM_GPU_POLICY_LEND_ABOVE_PEAK;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 12 * GIB, r.now_ns), HUVM_REASON_PEER);
}

/* The own peak's spike cadence (huvm_peak_update, huvm_peak_spike_ns): one spike per rise and fall of at least
 * HUVM_SPIKE_MIN_BYTES, however many steps; the intervals' EWMA, or the time since the last spike if longer. */
TEST(decide_peak_spike_cadence)
{
    const uint64_t ms = HUVM_NS_PER_MS, base = 1 * GIB, spike = base + 4 * GIB;
    huvm_peak_t pk;
    uint64_t t = 1000 * ms, i;

    huvm_memset(&pk, 0, sizeof(pk));
    CHECK_EQ(huvm_peak_spike_ns(&pk, t), 0);                /* nothing noted yet: unknown */
    huvm_peak_update(&pk, base, t);
    CHECK_EQ(huvm_peak_spike_ns(&pk, t + 7 * ms), 7 * ms);  /* no spike yet: the time since tracking began */
    /* spikes every 100 ms, each rising in 8 steps and falling in one */
    for (i = 0; i < 6; i++) {
        uint32_t k;

        for (k = 1; k <= 8; k++)
            huvm_peak_update(&pk, base + k * (spike - base) / 8, t + 100 * ms * i + k * ms);
        huvm_peak_update(&pk, base, t + 100 * ms * i + 50 * ms);
    }
    /* the first rise only starts the tracking's high; the spikes after it came 101 ms, then 100 ms apart */
    CHECK_EQ(pk.spike_at_ns, t + 501 * ms);
    CHECK(pk.spike_ewma_ns >= 100 * ms && pk.spike_ewma_ns < 101 * ms);
    CHECK_EQ(huvm_peak_spike_ns(&pk, t + 501 * ms), pk.spike_ewma_ns);
    CHECK_EQ(pk.bytes, spike);                              /* the peak itself is unchanged */
    /* noise below the threshold is no spike */
    huvm_peak_update(&pk, base + HUVM_SPIKE_MIN_BYTES - 1, t + 560 * ms);
    huvm_peak_update(&pk, base, t + 570 * ms);
    huvm_peak_update(&pk, base + HUVM_SPIKE_MIN_BYTES - 1, t + 580 * ms);
    CHECK_EQ(pk.spike_at_ns, t + 501 * ms);
    CHECK_EQ(huvm_peak_spike_ns(&pk, t + 590 * ms), pk.spike_ewma_ns);
    /* a lender that stopped spiking becomes a slow one; capped */
    CHECK_EQ(huvm_peak_spike_ns(&pk, t + 10000 * ms), 9499 * ms);
    CHECK_EQ(huvm_peak_spike_ns(&pk, ~0ULL), HUVM_SPIKE_MAX_NS);
    /* a rise of exactly the threshold from the low is a spike: the interval restarts */
    huvm_peak_update(&pk, base + HUVM_SPIKE_MIN_BYTES, t + 600 * ms);
    CHECK_EQ(huvm_peak_spike_ns(&pk, t + 600 * ms), pk.spike_ewma_ns);
    CHECK_EQ(pk.spike_at_ns, t + 600 * ms);
    CHECK_EQ(huvm_peak_spike_ns(NULL, t), 0);
}

/* The sliding window of guest traffic, from the pair counters. */
TEST(decide_traffic_window)
{
    const uint64_t ms = 1000000ULL, w = HUVM_LEND_TRAFFIC_WINDOW_MS * 1000000ULL;
    huvm_traffic_t t = { 0, 0, 0, 0, 0 };
    uint64_t t0 = 1000 * ms;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    CHECK_EQ(huvm_guest_traffic_total(&core, 1), 0);
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, 3 * CHUNK, 0);     /* in: 3 */
    huvm_account_prefetch(&core, 2, 1, CHUNK, 0);                          /* in: 1 */
    huvm_account_fetch(&core, 0, 1, HUVM_FETCHED_MOVED, CHUNK, 0);         /* out: 1 */
    huvm_account_giveback(&core, 1, 0, CHUNK, 0);                          /* out: 1 */
    huvm_account_evict(&core, 1, 0, HUVM_REASON_PEER, 0, 5 * CHUNK, 0);    /* 1's own data: not guests' */
    huvm_account_prefetch(&core, 1, 1, CHUNK, 0);                          /* local prefetch: not guests' */
    CHECK_EQ(huvm_guest_traffic_total(&core, 1), 6 * CHUNK);
    CHECK_EQ(huvm_guest_traffic_total(&core, 0), 5 * CHUNK);
    CHECK_EQ(huvm_guest_traffic_total(&core, 9), 0);

    CHECK_EQ(huvm_traffic_update(&t, 100, t0), 0);                 /* the first call starts the window */
    CHECK_EQ(huvm_traffic_update(&t, 100 + 10 * CHUNK, t0 + 10 * ms), 10 * CHUNK);
    /* one window on: all of the last window's traffic still counts at its very end ... */
    CHECK_EQ(huvm_traffic_update(&t, 100 + 10 * CHUNK, t0 + w), 10 * CHUNK);
    /* ... half of it half a window later, plus what came since */
    CHECK_EQ(huvm_traffic_update(&t, 100 + 12 * CHUNK, t0 + w + w / 2), 5 * CHUNK + 2 * CHUNK);
    /* two windows of silence forget everything */
    CHECK_EQ(huvm_traffic_update(&t, 100 + 12 * CHUNK, t0 + 4 * w + 1), 0);
    /* a counter reset (total below the window's start) starts over */
    CHECK_EQ(huvm_traffic_update(&t, 0, t0 + 4 * w + 2), 0);
    CHECK_EQ(huvm_traffic_update(&t, CHUNK, t0 + 4 * w + 3), CHUNK);
    /* a clock behind the window starts over too */
    CHECK_EQ(huvm_traffic_update(&t, 2 * CHUNK, t0), 0);
    CHECK_EQ(huvm_traffic_update(NULL, CHUNK, t0), 0);

    /* huvm_traffic_level: the pair counters' window for a GPU with a budget, 0 and a fresh window without */
    {
        huvm_policy_t p = core.policy;

        t.start_ns = 0;
        CHECK_EQ(huvm_traffic_level(&core, 1, &t, t0), 0);          /* no budget: nothing kept */
        CHECK_EQ(t.start_ns, 0);
        p.generation = 0;
        p.gpus[1].lend_traffic_mbyte_per_s = HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S;
        CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
        CHECK_EQ(huvm_traffic_level(&core, 1, &t, t0), 0);          /* the window starts */
        huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, 2 * CHUNK, 0);
        /* two chunks at 105 MB/s take 40 ms to pay for: paced (decide_traffic_pacing) */
        CHECK_EQ(huvm_traffic_level(&core, 1, &t, t0 + ms), 2 * CHUNK | HUVM_TRAFFIC_PACED);
        p.gpus[1].lend_traffic_mbyte_per_s = 0;
        CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
        CHECK_EQ(huvm_traffic_level(&core, 1, &t, t0 + 2 * ms), 0);
        CHECK_EQ(t.start_ns, 0);
        CHECK_EQ(huvm_traffic_level(&core, 1, NULL, t0), 0);
        CHECK_EQ(huvm_traffic_level(NULL, 1, &t, t0), 0);
    }
}

/* Pacing of a guest-traffic budget (issue 28): a lender still paying, at its budget's rate, for the guests' copies
 * it took is marked HUVM_TRAFFIC_PACED; a new chunk goes to a lender that has paid when one admits it (after the
 * link rate under FASTEST_LINK), and to a paced one only when none does, as without pacing. */
TEST(decide_traffic_pacing)
{
    const uint64_t ms = 1000000ULL, w = HUVM_LEND_TRAFFIC_WINDOW_MS * 1000000ULL;
    huvm_traffic_t t1 = { 0, 0, 0, 0, 0 }, t2 = { 0, 0, 0, 0, 0 };
    uint64_t t0 = 1000 * ms;
    huvm_evict_request_t r = fx_req(0, (1u << 1) | (1u << 2));
    huvm_policy_t p;

    /* the virtual clock: at 1000 MB/s a byte takes a ns */
    CHECK_EQ(huvm_traffic_paid_ns(&t1, 0, 1000, t0), t0);                           /* first call: nothing owed */
    CHECK_EQ(huvm_traffic_paid_ns(&t1, CHUNK, 1000, t0), t0 + CHUNK);
    CHECK_EQ(huvm_traffic_paid_ns(&t1, 2 * CHUNK, 1000, t0 + ms), t0 + 2 * CHUNK);   /* paid after the first */
    CHECK_EQ(huvm_traffic_paid_ns(&t1, 2 * CHUNK, 1000, t0 + 9 * ms), t0 + 9 * ms);        /* paid up: now */
    CHECK_EQ(huvm_traffic_paid_ns(&t1, 3 * CHUNK, 1000, t0 + 10 * ms), t0 + 10 * ms + CHUNK); /* paid up: from now */
    /* what is owed beyond a window is forgotten */
    CHECK_EQ(huvm_traffic_paid_ns(&t1, 103 * CHUNK, 1000, t0 + 10 * ms), t0 + 10 * ms + w);
    /* a counter reset starts over; no rate or no state: nothing owed */
    CHECK_EQ(huvm_traffic_paid_ns(&t1, 0, 1000, t0 + 11 * ms), t0 + 11 * ms);
    CHECK_EQ(huvm_traffic_paid_ns(&t1, CHUNK, 0, t0 + 12 * ms), t0 + 12 * ms);
    CHECK_EQ(huvm_traffic_paid_ns(NULL, CHUNK, 1000, t0), t0);

    /* two lenders on equal links, each with a budget of 1000 MB/s (a window: 20 MB, 9 chunks) */
    node4(HUVM_PEER_SELECT_FASTEST_LINK);
    p = core.policy;
    p.generation = 0;
    p.gpus[1].lend_traffic_mbyte_per_s = 1000;
    p.gpus[2].lend_traffic_mbyte_per_s = 1000;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_memset(&t1, 0, sizeof(t1));
    CHECK_EQ(huvm_traffic_level(&core, 1, &t1, t0), 0);
    CHECK_EQ(huvm_traffic_level(&core, 2, &t2, t0), 0);
    /* GPU 2 took 2 chunks and has paid for them (4.2 ms at its rate) by t0 + 20 ms */
    huvm_account_evict(&core, 0, 2, HUVM_REASON_PEER, 0, 2 * CHUNK, 0);
    CHECK_EQ(huvm_traffic_level(&core, 2, &t2, t0 + 10 * ms), 2 * CHUNK | HUVM_TRAFFIC_PACED);
    st[2].guest_traffic_bytes = huvm_traffic_level(&core, 2, &t2, t0 + 20 * ms);
    CHECK_EQ(st[2].guest_traffic_bytes, 2 * CHUNK);
    /* GPU 1 just took one: still paying for it */
    huvm_account_evict(&core, 0, 1, HUVM_REASON_PEER, 0, CHUNK, 0);
    CHECK_EQ(huvm_traffic_level(&core, 1, &t1, t0 + 20 * ms), CHUNK | HUVM_TRAFFIC_PACED);
    st[1].guest_traffic_bytes = huvm_traffic_level(&core, 1, &t1, t0 + 20 * ms);
    CHECK_EQ(st[1].guest_traffic_bytes, CHUNK | HUVM_TRAFFIC_PACED);
    /* fewest lent would pick GPU 1 (1 chunk against 2); it is still paying: GPU 2 */
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 2);
    /* the flag is no level: GPU 1 is within its window's budget */
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, r.now_ns), HUVM_REASON_PEER);
    /* a paced lender alone still takes it (pacing is a preference, the budget the limit) */
    r.candidates = 1u << 1;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    /* both paying: the fewest lent, as without pacing */
    r.candidates = (1u << 1) | (1u << 2);
    st[2].guest_traffic_bytes |= HUVM_TRAFFIC_PACED;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    /* GPU 1 has paid by t0 + 30 ms: fewest lent again */
    st[2].guest_traffic_bytes &= ~HUVM_TRAFFIC_PACED;
    st[1].guest_traffic_bytes = huvm_traffic_level(&core, 1, &t1, t0 + 30 * ms);
    CHECK_EQ(st[1].guest_traffic_bytes & HUVM_TRAFFIC_PACED, 0);
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    /* the link rate comes first: a faster lender still paying beats a slower one that has paid */
    st[1].guest_traffic_bytes |= HUVM_TRAFFIC_PACED;
    core.links[0][1].mbyte_per_s = 2 * core.links[0][2].mbyte_per_s;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
    /* the other choices: a lender that has paid first, then the choice's own order */
    p = core.policy;
    p.generation = 0;
    p.peer_select = HUVM_PEER_SELECT_MOST_FREE;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[1].free_bytes = 16 * GIB;
    st[2].free_bytes = 8 * GIB;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 2);
    st[1].guest_traffic_bytes &= ~HUVM_TRAFFIC_PACED;
    CHECK_EQ(huvm_decide_evict(&core, st, &r).dst, 1);
}

TEST(decide_admit_lend_direct)
{
    node4(HUVM_PEER_SELECT_MOST_FREE);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, CHUNK, 1), HUVM_REASON_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 0, CHUNK, 1), HUVM_REASON_NO_PEER);    /* itself */
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 7, CHUNK, 1), HUVM_REASON_NO_PEER);    /* no such GPU */
    CHECK_EQ(huvm_admit_lend(&core, st, 7, 1, CHUNK, 1), HUVM_REASON_NO_PEER);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, 17 * GIB, 1), HUVM_REASON_PEER_FULL);
    CHECK_EQ(huvm_admit_lend(&core, st, 0, 1, ~0ULL, 1), HUVM_REASON_PEER_FULL);
    CHECK_EQ(huvm_admit_lend(NULL, st, 0, 1, CHUNK, 1), HUVM_REASON_NO_PEER);
}

TEST(decide_preevict)
{
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.preevict_chunks = 50;
    p.preevict_batch = 8;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 0);            /* all free */
    st[0].free_bytes = 45 * CHUNK + 100;
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 5);            /* 50 - 45 */
    st[0].free_bytes = 0;
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 8);            /* capped by the batch */
    /* a harvester's behaviour: role none (opted out) and a lender only never pre-evict */
    CHECK_EQ(huvm_preevict_target(&core, 0), 50);
    fx_role(&core, 0, HUVM_ROLE_NONE, HUVM_UNLIMITED, 0);
    CHECK_EQ(huvm_preevict_target(&core, 0), 0);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 0);
    fx_role(&core, 0, HUVM_ROLE_LENDER, HUVM_UNLIMITED, 0);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 0);
    fx_role(&core, 0, HUVM_ROLE_HARVESTER, HUVM_UNLIMITED, 0);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 8);
    p = core.policy;
    p.generation = 0;
    p.preevict_chunks = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 0);            /* off */
    CHECK_EQ(huvm_decide_preevict(&core, st, 9), 0);            /* no such GPU */
    /* adaptive bound: at most 1/16 of a small GPU (64 chunks -> 4) */
    fx_node(&core, 2, 64 * CHUNK, HUVM_PRESET_ATC22);
    fx_state(&core, st);
    st[0].free_bytes = 0;
    CHECK_EQ(core.policy.preevict_chunks, 50);
    CHECK_EQ(huvm_preevict_target(&core, 0), 4);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 4);
    huvm_core_remove_gpu(&core, 0);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 0);            /* absent */
}

/* The whole pre-eviction decision: guests' chunks before the GPU's own, and (huvm) real pressure only. */
TEST(decide_preevict_plan)
{
    const uint64_t now = 1000000000ULL;
    huvm_giveback_plan_t plan;
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.preevict_chunks = 50;
    p.preevict_batch = 50;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK(core.policy.gpus[0].flags & HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE);     /* the huvm preset's */
    /* GPU 0 lends 3 chunks to GPU 1, 2 to GPU 2, and has no free memory. */
    huvm_account_evict(&core, 1, 0, HUVM_REASON_PEER, 0, 3 * CHUNK, 0);
    huvm_account_evict(&core, 2, 0, HUVM_REASON_PEER, 0, 2 * CHUNK, 0);
    st[0].free_bytes = 0;
    /* No allocation ever had to evict: below its reserve, but not under pressure (a job that nearly fits). */
    huvm_decide_preevict_plan(&core, st, 0, now, &plan);
    CHECK_EQ(plan.total_guest_chunks + plan.own_chunks, 0);
    CHECK_EQ(huvm_decide_preevict(&core, st, 0), 50);          /* the count alone knows no pressure */
    /* Pressure 1 ms ago, the last batch took 10 chunks: a reserve of 2 x 10, guests first. */
    st[0].last_pressure_ns = now - 1000000ULL;
    st[0].burst_chunks = 10;
    huvm_decide_preevict_plan(&core, st, 0, now, &plan);
    CHECK_EQ(plan.guest_chunks[1], 3);
    CHECK_EQ(plan.guest_chunks[2], 2);
    CHECK_EQ(plan.total_guest_chunks, 5);
    CHECK_EQ(plan.own_chunks, 10 * HUVM_PREEVICT_BURST_MULT - 5);
    /* A reserve never beyond the policy's, whatever the burst. */
    st[0].burst_chunks = 1000;
    huvm_decide_preevict_plan(&core, st, 0, now, &plan);
    CHECK_EQ(plan.total_guest_chunks + plan.own_chunks, 50);
    /* Pressure too long ago: nothing. A batch that took nothing: nothing. */
    st[0].last_pressure_ns = now - (uint64_t)HUVM_PREEVICT_PRESSURE_MS * 1000000ULL;
    huvm_decide_preevict_plan(&core, st, 0, now, &plan);
    CHECK_EQ(plan.total_guest_chunks + plan.own_chunks, 0);
    st[0].last_pressure_ns = now - 1;
    st[0].burst_chunks = 0;
    huvm_decide_preevict_plan(&core, st, 0, now, &plan);
    CHECK_EQ(plan.total_guest_chunks + plan.own_chunks, 0);
    /* Without the flag (the prototype's preset): the free reserve alone decides, guests still first. */
    p = core.policy;
    p.generation = 0;
    p.gpus[0].flags = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[0].last_pressure_ns = 0;
    huvm_decide_preevict_plan(&core, st, 0, now, &plan);
    CHECK_EQ(plan.total_guest_chunks, 5);
    CHECK_EQ(plan.own_chunks, 45);
    /* Enough free memory: nothing; bad arguments: nothing. */
    st[0].free_bytes = 60 * CHUNK;
    huvm_decide_preevict_plan(&core, st, 0, now, &plan);
    CHECK_EQ(plan.total_guest_chunks + plan.own_chunks, 0);
    st[0].free_bytes = 0;
    huvm_decide_preevict_plan(&core, st, 9, now, &plan);
    CHECK_EQ(plan.total_guest_chunks + plan.own_chunks, 0);
    huvm_decide_preevict_plan(NULL, st, 0, now, &plan);
    CHECK_EQ(plan.total_guest_chunks + plan.own_chunks, 0);
    huvm_decide_preevict_plan(&core, st, 0, now, NULL);     /* no crash */
}

TEST(decide_fetch_route)
{
    huvm_link_t pcie = { HUVM_LINK_PCIE, 0, 16000 };
    huvm_link_t c2c = { HUVM_LINK_C2C, 1, 450000 };
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    CHECK_EQ(huvm_decide_fetch(&core, 0, 1), HUVM_FETCH_MIGRATE);     /* policy: migrate */
    p = core.policy;
    p.generation = 0;
    p.fetch_mode = HUVM_FETCH_REMOTE_MAP;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_decide_fetch(&core, 0, 1), HUVM_FETCH_REMOTE_MAP);
    huvm_core_set_link(&core, 0, 2, &pcie);
    CHECK_EQ(huvm_decide_fetch(&core, 0, 2), HUVM_FETCH_MIGRATE);     /* never over PCIe */
    huvm_core_set_link(&core, 0, 3, &c2c);
    CHECK_EQ(huvm_decide_fetch(&core, 0, 3), HUVM_FETCH_REMOTE_MAP);
    CHECK_EQ(huvm_decide_fetch(&core, 0, HUVM_DEST_HOST), HUVM_FETCH_MIGRATE);
    CHECK_EQ(huvm_decide_fetch(&core, 0, 0), HUVM_FETCH_MIGRATE);
    huvm_core_remove_gpu(&core, 1);
    CHECK_EQ(huvm_decide_fetch(&core, 0, 1), HUVM_FETCH_MIGRATE);     /* holder gone */
}

/* The prototype's two-stage prefetch: host-resident chunks of the window to a peer, peer-resident ones to the
 * faulting GPU (peer_local_chunks); never host -> local. Without an admitting peer only the second stage. */
TEST(decide_prefetch_two_stage)
{
    huvm_prefetch_plan_t plan;
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.prefetch_mode = HUVM_PREFETCH_TWO_STAGE;
    p.prefetch_chunks = 16;
    p.prefetch_stride = 2;
    p.gpus[0].flags = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[0].last_pressure_ns = 1;                                 /* under pressure (decide_prefetch_pressure_gate) */
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks, 0);
    CHECK_EQ(plan.peer_local_chunks, 16);
    CHECK_EQ(plan.peer_chunks, 16);
    CHECK(plan.peer != HUVM_DEST_HOST && plan.peer != 0);
    CHECK_EQ(plan.stride, 2);
    huvm_decide_prefetch(&core, st, 0, 0, 1, &plan);           /* no candidate peer */
    CHECK_EQ(plan.peer_chunks, 0);
    CHECK_EQ(plan.peer, HUVM_DEST_HOST);
    CHECK_EQ(plan.peer_local_chunks, 16);
    p.prefetch_mode = HUVM_PREFETCH_MULTIPATH;                  /* MULTIPATH and PEER leave the second stage out */
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 0);
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 16);
}

/* Prefetch feedback (the huvm preset's flag): while more recent prefetches went unused than were used, one
 * chunk (a probe) instead of prefetch_chunks; the counts halve at the window, so they follow the present. */
TEST(decide_prefetch_feedback)
{
    huvm_prefetch_plan_t plan;
    huvm_policy_t p;
    uint64_t used = 0, unused = 0;
    uint32_t i;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.prefetch_mode = HUVM_PREFETCH_MULTIPATH;
    p.prefetch_chunks = 16;
    p.gpus[0].flags &= ~(uint32_t)HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL; /* the feedback alone (below: both) */
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK(core.policy.gpus[0].flags & HUVM_GPU_POLICY_PREFETCH_FEEDBACK);
    st[0].last_pressure_ns = 1;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 16);         /* no history: the full window */
    st[0].prefetch_unused = 5;
    st[0].prefetch_used = 4;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 1);          /* mostly wasted: a probe */
    st[0].prefetch_used = 5;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 16);         /* half used: worth it again */
    p.gpus[0].flags = 0;                                        /* without the flag: always the window */
    st[0].prefetch_used = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 16);
    fx_state(&core, st);
    /* the counts: one per prefetched chunk, halved together at the window */
    for (i = 0; i < HUVM_PREFETCH_FEEDBACK_WINDOW - 1; i++)
        huvm_prefetch_feedback(&used, &unused, i % 4 == 0);
    CHECK_EQ(used + unused, HUVM_PREFETCH_FEEDBACK_WINDOW - 1);
    huvm_prefetch_feedback(&used, &unused, 1);
    CHECK(used + unused <= HUVM_PREFETCH_FEEDBACK_WINDOW / 2 && used + unused >= HUVM_PREFETCH_FEEDBACK_WINDOW / 2 - 1);
    CHECK(unused > used);
    huvm_prefetch_feedback(NULL, &unused, 1);                   /* no crash */
}

/* PREFETCH_PROPORTIONAL (the huvm preset's flag, issue 28): while the feedback's probe does not apply, the window is
 * prefetch_chunks times the used share of the recent prefetched chunks, rounded up, at least 1; the full window
 * with no history; integer only, whatever the caller's counts. */
TEST(decide_prefetch_proportional)
{
    huvm_prefetch_plan_t plan;
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.prefetch_mode = HUVM_PREFETCH_TWO_STAGE;
    p.prefetch_chunks = 16;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK(core.policy.gpus[0].flags & HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL);
    CHECK(core.policy.gpus[0].flags & HUVM_GPU_POLICY_PREFETCH_FEEDBACK);
    st[0].last_pressure_ns = 1;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 16);                       /* no history: the full window */
    CHECK_EQ(plan.peer_chunks, 16);
    st[0].prefetch_used = 45;
    st[0].prefetch_unused = 11;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 13);                       /* 16 x 45 / 56 = 12.9: rounded up */
    CHECK_EQ(plan.peer_chunks, 13);                             /* both stages take the scaled window */
    st[0].prefetch_used = 5;
    st[0].prefetch_unused = 5;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 8);                        /* half used: half the window */
    st[0].prefetch_used = 64;
    st[0].prefetch_unused = 0;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 16);                       /* all used: the whole window */
    st[0].prefetch_used = 1;
    st[0].prefetch_unused = 63;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 1);                        /* mostly wasted: the feedback's probe */
    p.gpus[0].flags &= ~(uint32_t)HUVM_GPU_POLICY_PREFETCH_FEEDBACK;
    p.generation = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 1);                        /* alone: 16 / 64 = 0.25, rounded up to 1 */
    st[0].prefetch_used = 0;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 1);                        /* none used: at least 1 */
    st[0].prefetch_used = ~0ULL;                                /* counts near 2^64: no overflow */
    st[0].prefetch_unused = ~0ULL;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK(plan.peer_local_chunks >= 8 && plan.peer_local_chunks <= 16);
    st[0].prefetch_used = 3ULL << 40;
    st[0].prefetch_unused = 1ULL << 40;
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 12);                       /* 3/4 of 16 at any scale */
    p.gpus[0].flags &= ~(uint32_t)HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL;
    p.generation = 0;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.peer_local_chunks, 16);                       /* without the flag: the window */
    fx_state(&core, st);
}

/* The stock preset plans no prefetch for any GPU, whatever the node's state: its fault path (the kernel's
 * uvm_huvm_fault_batch_done()) never gathers the node's state. Every other preset prefetches. */
TEST(decide_prefetch_active_by_preset)
{
    static const uint32_t presets[] = { HUVM_PRESET_STOCK, HUVM_PRESET_ATC22, HUVM_PRESET_HUVM };
    huvm_policy_t p;
    uint32_t k, g;

    for (k = 0; k < sizeof(presets) / sizeof(presets[0]); k++) {
        node4(HUVM_PEER_SELECT_MOST_FREE);
        CHECK_EQ(huvm_policy_preset(presets[k], &core, &p), HUVM_NV_OK);
        CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
        for (g = 0; g < core.gpu_count; g++)
            CHECK_EQ(!!huvm_prefetch_active(&core, g), presets[k] != HUVM_PRESET_STOCK);
    }
}

TEST(decide_prefetch_modes)
{
    huvm_prefetch_plan_t plan;
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.prefetch_chunks = 16;
    p.prefetch_stride = 2;
    st[0].last_pressure_ns = 1;                                 /* under pressure: peers may take a share */

    p.prefetch_mode = HUVM_PREFETCH_OFF;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK_EQ(huvm_prefetch_active(&core, 0), 0);               /* the fault path gathers no state */
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 0);
    CHECK_EQ(plan.peer, HUVM_DEST_HOST);

    p.prefetch_mode = HUVM_PREFETCH_LOCAL;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    CHECK(huvm_prefetch_active(&core, 0));
    CHECK_EQ(huvm_prefetch_active(&core, core.gpu_count), 0);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks, 16);
    CHECK_EQ(plan.peer_chunks, 0);
    CHECK_EQ(plan.peer_local_chunks, 16);      /* peer-resident chunks come local too (prototype's flags 1) */
    CHECK_EQ(plan.stride, 2);

    p.prefetch_mode = HUVM_PREFETCH_PEER;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks, 0);
    CHECK_EQ(plan.peer_chunks, 16);
    CHECK_EQ(plan.peer, 1);
    huvm_decide_prefetch(&core, st, 0, 0, 1, &plan);           /* no peer: PEER does not go local */
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 0);

    p.prefetch_mode = HUVM_PREFETCH_MULTIPATH;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);         /* equal PCIe: half and half */
    CHECK_EQ(plan.local_chunks, 8);
    CHECK_EQ(plan.peer_chunks, 8);
    core.gpus[1].pcie_mbyte_per_s = 32000;                     /* peer twice as fast: 16*32/48 = 10 */
    huvm_decide_prefetch(&core, st, 0, 1u << 1, 1, &plan);
    CHECK_EQ(plan.peer_chunks, 10);
    CHECK_EQ(plan.local_chunks, 6);
    CHECK_EQ(plan.peer, 1);
    st[1].free_bytes = 9 * CHUNK;                               /* peer cannot take its 10 */
    huvm_decide_prefetch(&core, st, 0, 1u << 1, 1, &plan);
    CHECK_EQ(plan.peer_chunks, 0);
    CHECK_EQ(plan.local_chunks, 16);                            /* all local */
    core.gpus[1].pcie_mbyte_per_s = 0;                          /* a share of nothing: no peer */
    st[1].free_bytes = 16 * GIB;
    huvm_decide_prefetch(&core, st, 0, 1u << 1, 1, &plan);
    CHECK_EQ(plan.local_chunks, 16);
    /* a GPU that does not harvest keeps its prefetch local */
    fx_role(&core, 0, HUVM_ROLE_LENDER, HUVM_UNLIMITED, 0);
    huvm_decide_prefetch(&core, st, 0, ALL, 1, &plan);
    CHECK_EQ(plan.local_chunks, 16);
    CHECK_EQ(plan.peer_chunks, 0);
    huvm_decide_prefetch(&core, st, 12, ALL, 1, &plan);         /* bad GPU */
    CHECK_EQ(plan.local_chunks + plan.peer_chunks, 0);
}

/* Issue 12 defect 3: data goes to a peer by prefetch only under real memory pressure on the faulting GPU (an
 * allocation on it had to evict within HUVM_PREEVICT_PRESSURE_MS). A GPU with room prefetches locally
 * (MULTIPATH), brings only peer-held chunks back (TWO_STAGE) or prefetches nothing (PEER). */
TEST(decide_prefetch_pressure_gate)
{
    const uint64_t now = 10ULL * 1000 * HUVM_NS_PER_MS;        /* 10 s */
    const uint64_t window = (uint64_t)HUVM_PREEVICT_PRESSURE_MS * HUVM_NS_PER_MS;
    huvm_prefetch_plan_t plan;
    huvm_policy_t p;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    p = core.policy;
    p.generation = 0;
    p.prefetch_chunks = 16;
    p.prefetch_stride = 1;
    p.gpus[0].flags = 0;

    p.prefetch_mode = HUVM_PREFETCH_MULTIPATH;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    st[0].last_pressure_ns = 0;                                 /* never evicted: all local */
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);
    CHECK_EQ(plan.local_chunks, 16);
    CHECK_EQ(plan.peer_chunks, 0);
    CHECK_EQ(plan.peer, HUVM_DEST_HOST);
    st[0].last_pressure_ns = now - window;                      /* the window just ended: no pressure */
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);
    CHECK_EQ(plan.local_chunks, 16);
    CHECK_EQ(plan.peer_chunks, 0);
    st[0].last_pressure_ns = now - window + 1;                  /* still within it: a peer takes its share */
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);
    CHECK_EQ(plan.local_chunks, 8);
    CHECK_EQ(plan.peer_chunks, 8);
    CHECK(plan.peer != HUVM_DEST_HOST && plan.peer != 0);
    st[1].last_pressure_ns = now;                               /* another GPU's pressure does not count */
    st[0].last_pressure_ns = 0;
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);
    CHECK_EQ(plan.peer_chunks, 0);
    st[1].last_pressure_ns = 0;

    p.prefetch_mode = HUVM_PREFETCH_TWO_STAGE;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);        /* room: only peer -> local */
    CHECK_EQ(plan.peer_chunks, 0);
    CHECK_EQ(plan.peer, HUVM_DEST_HOST);
    CHECK_EQ(plan.local_chunks, 0);
    CHECK_EQ(plan.peer_local_chunks, 16);
    st[0].last_pressure_ns = now;
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);        /* pressure: both stages */
    CHECK_EQ(plan.peer_chunks, 16);
    CHECK_EQ(plan.peer_local_chunks, 16);

    p.prefetch_mode = HUVM_PREFETCH_PEER;
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);
    CHECK_EQ(plan.peer_chunks, 16);
    st[0].last_pressure_ns = 0;
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);        /* room: nothing to a peer */
    CHECK_EQ(plan.peer_chunks + plan.local_chunks + plan.peer_local_chunks, 0);

    p.prefetch_mode = HUVM_PREFETCH_LOCAL;                      /* LOCAL never needed pressure */
    CHECK_EQ(fx_apply(&core, &p), HUVM_NV_OK);
    huvm_decide_prefetch(&core, st, 0, ALL, now, &plan);
    CHECK_EQ(plan.local_chunks, 16);
}

TEST(decide_giveback_order)
{
    huvm_giveback_plan_t plan;
    uint32_t o;

    node4(HUVM_PEER_SELECT_MOST_FREE);
    /* lender 3 holds 2 chunks of GPU 0, 5 of GPU 1, 5 of GPU 2 */
    huvm_account_evict(&core, 0, 3, HUVM_REASON_PEER, 0, 2 * CHUNK, 0);
    huvm_account_evict(&core, 1, 3, HUVM_REASON_PEER, 0, 5 * CHUNK, 0);
    huvm_account_evict(&core, 2, 3, HUVM_REASON_PEER, 0, 5 * CHUNK, 0);
    huvm_decide_giveback(&core, st, 3, 7 * CHUNK, &plan);
    CHECK_EQ(plan.guest_chunks[1], 5);     /* most held first, tie to the lower index */
    CHECK_EQ(plan.guest_chunks[2], 2);
    CHECK_EQ(plan.guest_chunks[0], 0);
    CHECK_EQ(plan.total_guest_chunks, 7);
    CHECK_EQ(plan.own_chunks, 0);          /* own data never yields while guests remain */
    huvm_decide_giveback(&core, st, 3, 20 * CHUNK, &plan);
    CHECK_EQ(plan.total_guest_chunks, 12);
    CHECK_EQ(plan.own_chunks, 8);
    huvm_decide_giveback(&core, st, 3, 1, &plan);              /* a byte is a chunk */
    CHECK_EQ(plan.total_guest_chunks, 1);
    huvm_decide_giveback(&core, st, 0, 3 * CHUNK, &plan);       /* lender holding nothing */
    CHECK_EQ(plan.total_guest_chunks, 0);
    CHECK_EQ(plan.own_chunks, 3);
    huvm_decide_giveback(&core, st, 9, 3 * CHUNK, &plan);       /* bad GPU */
    for (o = 0; o < HUVM_MAX_GPUS; o++)
        CHECK_EQ(plan.guest_chunks[o], 0);
    CHECK_EQ(plan.own_chunks, 0);
}

TEST(decide_is_pure_and_deterministic)
{
    static huvm_core_t before;
    huvm_evict_request_t r = fx_req(0, ALL);
    huvm_prefetch_plan_t p1, p2;
    huvm_giveback_plan_t g1, g2;
    huvm_decision_t a, b;

    fx_node(&core, 8, 80 * GIB, HUVM_PRESET_HUVM);
    fx_state(&core, st);
    huvm_account_evict(&core, 1, 2, HUVM_REASON_PEER, 0, 3 * CHUNK, 0);
    memcpy(&before, &core, sizeof(core));
    a = huvm_decide_evict(&core, st, &r);
    b = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(a.dst, b.dst);
    CHECK_EQ(a.reason, b.reason);
    huvm_decide_prefetch(&core, st, 0, ALL, 5, &p1);
    huvm_decide_prefetch(&core, st, 0, ALL, 5, &p2);
    CHECK(memcmp(&p1, &p2, sizeof(p1)) == 0);
    huvm_decide_giveback(&core, st, 2, 9 * CHUNK, &g1);
    huvm_decide_giveback(&core, st, 2, 9 * CHUNK, &g2);
    CHECK(memcmp(&g1, &g2, sizeof(g1)) == 0);
    (void)huvm_decide_preevict(&core, st, 0);
    (void)huvm_decide_fetch(&core, 0, 1);
    (void)huvm_admit_lend(&core, st, 0, 1, CHUNK, 5);
    CHECK(memcmp(&before, &core, sizeof(core)) == 0);   /* nothing written */
    CHECK_EQ(huvm_test_event_count, 1);                  /* only the accounting traced */
}

TEST(decide_presets_on_8_gpus)
{
    huvm_evict_request_t r = fx_req(0, ALL);
    huvm_decision_t d;

    fx_node(&core, 8, 80 * GIB, HUVM_PRESET_ATC22);
    fx_state(&core, st);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.reason, HUVM_REASON_PEER);
    CHECK_EQ(d.dst, 1);
    /* 85% usage cap of the prototype */
    st[1].free_bytes = 80 * GIB * 15 / 100 - 1;
    CHECK(huvm_decide_evict(&core, st, &r).dst != 1);
    fx_node(&core, 8, 80 * GIB, HUVM_PRESET_HUVM);
    fx_state(&core, st);
    d = huvm_decide_evict(&core, st, &r);
    CHECK_EQ(d.reason, HUVM_REASON_PEER);
    /* huvm: 5% reserve = 4 GiB on 80 GiB */
    CHECK_EQ(huvm_policy_gpu(&core, 3)->lend_reserve_bytes, 4 * GIB);
}

/* A batch of pre-evictions (huvm_decide_evict_run) decides every chunk as huvm_decide_evict would, over random
 * nodes and states: peer choices, limits, reserves, usage caps, lend-above-peak lenders, traffic budgets,
 * hysteresis, chunks fetched back recently, moves the caller could not make (no memory on the peer). After
 * each chunk that goes to a peer, the state moves as the simulator's does: the peer's free bytes down and
 * its lent bytes up by one chunk, its guest traffic up by one chunk. */
static uint64_t run_rand_state = 88172645463325252ULL;

static uint64_t run_rand(uint64_t n)
{
    run_rand_state ^= run_rand_state << 13;
    run_rand_state ^= run_rand_state >> 7;
    run_rand_state ^= run_rand_state << 17;
    return n ? run_rand_state % n : 0;
}

TEST(decide_evict_run_matches_per_chunk)
{
    static const uint32_t selects[] = { HUVM_PEER_SELECT_MOST_FREE, HUVM_PEER_SELECT_FEWEST_LENT,
                                        HUVM_PEER_SELECT_BW_WEIGHTED, HUVM_PEER_SELECT_FASTEST_LINK,
                                        HUVM_PEER_SELECT_ROUND_ROBIN };
    const uint64_t mem = 1 * GIB;
    uint32_t trial, runs = 0, long_runs = 0;

    for (trial = 0; trial < 4000; trial++) {
        uint32_t n = 2 + (uint32_t)run_rand(4), g, owner = (uint32_t)run_rand(n), batch = 1 + (uint32_t)run_rand(200);
        uint32_t k, decided = 0;
        huvm_evict_run_t run = { 0, 0 };
        huvm_evict_request_t r;

        fx_node(&core, n, mem, HUVM_PRESET_HUVM);
        fx_state(&core, st);
        core.policy.peer_select = selects[run_rand(5)];
        core.policy.peer_usage_max_pct = 50 + (uint32_t)run_rand(51);
        core.policy.hysteresis_ms = run_rand(3) ? 0 : 5;
        for (g = 0; g < n; g++) {
            huvm_gpu_policy_t *e = (huvm_gpu_policy_t *)huvm_policy_gpu(&core, g);

            fx_role(&core,
                    g,
                    g == owner ? HUVM_ROLE_BOTH : (uint32_t)run_rand(HUVM_ROLE_COUNT),
                    run_rand(4) ? HUVM_UNLIMITED : run_rand(mem),
                    run_rand(2) ? 0 : run_rand(mem / 4));
            e->flags = run_rand(3) ? 0 : HUVM_GPU_POLICY_LEND_ABOVE_PEAK;
            e->lend_slowdown_max_pct = run_rand(2) ? 0 : 1 + (uint32_t)run_rand(50);
            e->lend_traffic_mbyte_per_s = run_rand(4) ? 0 : 1 + (uint32_t)run_rand(100000);
            core.hbm_mbyte_per_s[g] = run_rand(2) ? 0 : 3000000;
            st[g].free_bytes = run_rand(10) ? run_rand(mem + 1) : mem + run_rand(mem);     /* some clamped */
            st[g].own_peak_bytes = run_rand(mem);
            st[g].own_spike_ns = run_rand(2000000000ULL);
            st[g].guest_traffic_bytes = run_rand(64) * CHUNK;
            st[g].last_evict_ns = run_rand(4) ? 0 : 1000000000ULL - run_rand(10000000ULL);
            if (g != owner && run_rand(2))
                huvm_account_evict(&core, owner, g, HUVM_REASON_PEER, 1, run_rand(64) * CHUNK, 0);
        }
        r = fx_req(owner, run_rand(4) ? ALL : (uint32_t)run_rand(1u << n));
        r.flags = HUVM_EVICT_FLAG_PREEVICT;
        for (k = 0; k < batch; k++) {
            huvm_decision_t want, got;
            uint32_t left_before = run.left;

            r.chunk_fetched_ns = run_rand(8) ? 0 : r.now_ns - run_rand(10000000ULL);
            want = huvm_decide_evict(&core, st, &r);
            got = huvm_decide_evict_run(&core, st, &r, &run, batch - k);
            CHECK_EQ(got.dst, want.dst);
            CHECK_EQ(got.reason, want.reason);
            if (got.dst != want.dst || got.reason != want.reason)
                return;
            decided += left_before == 0;
            if (want.dst >= n || run_rand(10) == 0)
                continue;                   /* to host, or the caller found no memory on the peer */
            st[want.dst].free_bytes -= st[want.dst].free_bytes >= CHUNK ? CHUNK : st[want.dst].free_bytes;
            st[want.dst].guest_traffic_bytes += CHUNK;
            huvm_account_evict(&core, owner, want.dst, want.reason, 1, CHUNK, 0);
            huvm_evict_run_moved(&run, want.dst);
        }
        runs++;
        long_runs += decided * 4 < batch;   /* the batch took fewer decisions than a quarter of its chunks */
    }
    CHECK(runs == 4000);
    CHECK(long_runs > 100);                 /* the runs do cover many chunks (not a decision per chunk) */
}
