# The LLM planner's own cost (llm): kforge tune --planner llm on a scripted
# transcript (bench/llm_double.py answers with a fixed latency, BENCH_LLM_DELAY_MS,
# default 200), ROUNDS times (BENCH_LLM_ROUNDS, default 3).  The transcript:
# on kernels/add.py at 256x4096 fp32, a restructure with wrong numbers, a
# faster tiling (accepted), then finish.  Reported per run: wall time and
# tokens per accepted kernel, and the loop's overhead: the LLM phase's wall
# time less the time in sandboxed evaluations and in the model's calls (the
# double's latency and HTTP), as a fraction of that wall time (target <= 5%).
# Sourced by bench/run.sh.
bench_llm() {
  local rounds=${BENCH_LLM_ROUNDS:-3} delay=${BENCH_LLM_DELAY_MS:-200} dir=$TMP/llm port pid
  echo "== llm: kforge tune --planner llm on a scripted transcript, model latency ${delay} ms, $rounds runs"
  mkdir -p "$dir"
  "$PY" - "$dir" <<'PYEOF' || return 1
import json, sys
d = sys.argv[1]
src = open("kernels/add.py").read()
wrong = src.replace("op=nl.add)", "op=nl.subtract)", 1)
wide = src.replace('"default": 512', '"default": 2048', 1).replace("TILE_F=512", "TILE_F=2048", 1)
def tool(i, name, args):
    return {"id": "b%d" % i, "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "c%d" % i, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]}}],
            "usage": {"prompt_tokens": 1500, "completion_tokens": 400}}
json.dump([tool(1, "propose", {"source": wrong, "reason": "subtract"}),
           tool(2, "propose", {"source": wide, "reason": "wider tiles"}),
           tool(3, "finish", {})], open(d + "/replies.json", "w"))
PYEOF
  for r in $(seq 1 "$rounds"); do
    port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$PY" bench/llm_double.py "$dir/replies.json" "$port" "$delay" & pid=$!
    sleep 0.5
    rm -rf "$dir/out$r"
    KFORGE_LLM_URL=http://127.0.0.1:$port/v1 KFORGE_LLM_MODEL=bench KFORGE_LLM_RETRIES=0 \
      "$BUILD/bin/kforge" tune kernels/add.py --entry add --reference kernels/add.py --ref-entry add_ref \
        --input a=shape:256x4096:fp32 --input b=shape:256x4096:fp32 --planner llm --llm-restructure 3 \
        --iterations 1 --seeds 2 --jobs 1 --output-dir "$dir/out$r" --quiet --json >"$dir/res$r.json" 2>"$dir/err$r"
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  done
  "$PY" - "$dir" "$rounds" <<'PYEOF'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
rows = []
for r in range(1, n + 1):
    try:
        res = json.load(open("%s/res%d.json" % (d, r)))
    except Exception as e:
        print("   run %d: no result (%s); see %s/err%d" % (r, e, d, r)); continue
    l = res["llm"]
    acc = sum(1 for h in l["history"] if h.get("accepted") and h.get("action") == "propose")
    tok = l["llm"]["prompt_tokens"] + l["llm"]["completion_tokens"]
    over = l["seconds"] - l["eval_seconds"] - l["llm_seconds"]
    rows.append((l["seconds"], l["eval_seconds"], l["llm_seconds"], over, acc, tok))
    print("   run %d: wall %.2f s = evaluations %.2f + model %.2f + loop %.3f s; %d accepted, %d tokens"
          % (r, l["seconds"], l["eval_seconds"], l["llm_seconds"], over, acc, tok))
if rows:
    wall = statistics.median(x[0] for x in rows)
    frac = statistics.median(x[3] / x[0] for x in rows)
    acc = statistics.median(x[4] for x in rows)
    tok = statistics.median(x[5] for x in rows)
    print("   per accepted kernel: %.2f s wall, %.0f tokens" % (wall / acc, tok / acc) if acc else "   no accepted kernel")
    print("   loop overhead outside evaluations and the model: median %.2f%% of the LLM phase's wall (target <= 5%%): %s"
          % (100 * frac, "meets" if frac <= 0.05 else "MISSES"))
PYEOF
}
