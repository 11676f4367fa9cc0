"""A scripted OpenAI-compatible chat-completions server for bench/llm.sh.

python3 bench/llm_double.py REPLIES.json PORT DELAY_MS

REPLIES.json is a list of chat-completion bodies; POST .../chat/completions
answers them in order, each after DELAY_MS (the model's latency), then 500.
Standard library only; one request at a time, as the planner sends them.
"""
import http.server
import json
import sys
import time

replies = json.load(open(sys.argv[1]))
delay = int(sys.argv[3]) / 1000.0
state = {"next": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self.path.endswith("/chat/completions"):
            self.send_response(404)
            self.end_headers()
            return
        time.sleep(delay)
        if state["next"] < len(replies):
            body, status = json.dumps(replies[state["next"]]).encode(), 200
            state["next"] += 1
        else:
            body, status = b'{"error": {"message": "script exhausted"}}', 500
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
