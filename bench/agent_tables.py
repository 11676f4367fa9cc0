"""Tables for bench/agent_bench.sh: agent_tables.py quality|search FILE.jsonl"""
import json
import statistics
import sys

# Issue 19's goals: every library op at least 0.70 of its bound, flash
# attention and depthwise conv2d at least 0.60; the five core ops (matmul,
# softmax, rmsnorm, layernorm, swiglu) were 0.93-0.99 when it was filed and
# may go no lower, so they are held to 0.93.
CORE_OPS = {"matmul", "softmax", "rmsnorm", "layernorm", "swiglu"}
PORTS = {"psum_port": "NC-v2's shared VectorE/ScalarE PSUM port", "sbuf_port": "NC-v2's shared VectorE/GpSimd SBUF port"}
GOALS = {**{op: 0.93 for op in CORE_OPS}, "flash_attention": 0.60, "depthwise_conv2d": 0.60}


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def quality(path):
    last = {}
    for r in rows(path):            # a re-run of an (op, target) replaces the earlier row
        last[(r["op"], r["target"])] = r
    rs = list(last.values())
    print(f"   {'op':<17}{'target':<7}{'shapes':<34}{'default':>8}{'tuned':>7}{'reach':>6}{'speedup':>8}  {'iters':>5}"
          f"  goal          limit")
    ovh, outside = [], []
    for r in rs:
        speed = r["default_us"] / r["best_us"] if r["best_us"] else 0
        want = GOALS.get(r["op"], 0.70)
        # the goals are quoted to two decimals, as the table prints fractions
        goal = f"{'meets' if round(r['best_fraction'], 2) >= want else 'BELOW'} {want:.2f}"
        limit = r["limiting_finding"] if r["limiting_finding"] != "none" else f"{r['pipeline_engine']} engine busy"
        if r.get("reach_fraction", 1.0) < 0.98:   # the 2% slack of the report (ka_reach_text)
            who = PORTS.get(r["pipeline_engine"], f"{r['pipeline_engine']} engine's own work")
            limit += f"; {who} caps it at {r['reach_fraction']:.2f}"
        print(f"   {r['op']:<17}{r['target']:<7}{r['shapes'][:33]:<34}{r['default_fraction']:>8.2f}{r['best_fraction']:>7.2f}"
              f"{r.get('reach_fraction', 1.0):>6.2f}{speed:>7.2f}x  {int(r['iterations']):>5}  {goal:<12}  {limit}")
        ovh.append(r["timings"]["loop_overhead_fraction"])
        outside.append(r["timings"]["outside_sim_fraction"])
    if ovh:
        print("   reach: the most of the bound the tuned kernel can reach: the bound over its busiest engine's (or NC-v2 shared port's) own time")
        print(f"   loop overhead (agent code outside the sandboxed evaluations): median {100 * statistics.median(ovh):.3f}% "
              f"of wall, max {100 * max(ovh):.3f}% (target <= 5%)")
        print(f"   outside the simulator (sandbox, inputs, NumPy reference, comparison): median "
              f"{100 * statistics.median(outside):.1f}% of wall")


def search(path):
    last = {}
    for r in rows(path):
        last[r["op"]] = r
    rs = list(last.values())
    print(f"   {'op':<17}{'space':>6}{'exhaustive':>11}{'guided':>8}{'random med':>11}  guided/exh  guided<random")
    for r in rs:
        g, e, m = r["guided_evals"], r["space"], r["random_median_evals"]
        gtxt = str(int(g)) if g > 0 else "never"
        ratio = f"{g / e:.2f}" if g > 0 and e else "-"
        print(f"   {r['op']:<17}{int(e):>6}{int(r['exhaustive_evals']):>11}{gtxt:>8}{m:>11.1f}  {ratio:>10}  "
              f"{'yes' if 0 < g < m else 'no'}")
    print("   (exhaustive column: evaluations exhaustive order needed; space = all legal settings it ran)")


if __name__ == "__main__":
    {"quality": quality, "search": search}[sys.argv[1]](sys.argv[2])
