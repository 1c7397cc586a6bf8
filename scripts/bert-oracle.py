#!/usr/bin/env python3
"""Records llama.cpp's embeddings and rerank scores of rill's tiny bert test
models into engine/model/testdata/llamacpp_bert.json.

Run three llama-servers on files written by testmodel.WriteBertFile
(TinyBert to bert.gguf, TinyBertReranker to reranker.gguf):
  llama-server -m bert.gguf --embeddings --pooling mean --port 18931
  llama-server -m bert.gguf --embeddings --pooling cls  --port 18933
  llama-server -m reranker.gguf --reranking            --port 18932
then: python3 scripts/bert-oracle.py > engine/model/testdata/llamacpp_bert.json

With the argument nomic it records TinyNomicBert (written to nomic.gguf)
instead, embeddings only:
  llama-server -m nomic.gguf --embeddings --pooling mean --port 18941
  llama-server -m nomic.gguf --embeddings --pooling cls  --port 18942
then: python3 scripts/bert-oracle.py nomic > engine/model/testdata/llamacpp_nomic_bert.json

With nomic-moe, TinyNomicBertMoE (written to moe.gguf), ports 18943 (mean)
and 18944 (cls), into llamacpp_nomic_bert_moe.json.
"""
import json
import sys
import urllib.request


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))


SEQS = [[1, 50, 60, 70, 2], [1, 300, 301, 2], [7], list(range(100, 140)), [1, 2, 1, 2, 1, 2]]


def embeddings(port):
    r = post(port, "/embeddings", {"content": SEQS})
    return [e["embedding"][0] for e in sorted(r, key=lambda e: e["index"])]


NOMIC = {"nomic": ("TinyNomicBert", 18941, 18942), "nomic-moe": ("TinyNomicBertMoE", 18943, 18944)}
if sys.argv[1:2] and sys.argv[1] in NOMIC:
    name, mean, cls = NOMIC[sys.argv[1]]
    json.dump({
        "note": f"llama-server (llama.cpp v0.4.0 80fb11a) on testmodel.{name}; embeddings L2-normalised by the server",
        "sequences": SEQS,
        "mean": embeddings(mean),
        "cls": embeddings(cls),
    }, open(1, "w"), indent=1)
    sys.exit(0)

QUERY = "the cat"
DOCS = ["a dog ran", "the cat sat on the mat", "hello world", "cat cat cat", "the"]


def tokens(text):
    return post(18932, "/tokenize", {"content": text, "add_special": False})["tokens"]


rank = post(18932, "/rerank", {"query": QUERY, "documents": DOCS})
q = tokens(QUERY)
# llama-server's rerank input without a template: BOS query EOS doc EOS.
rerank_seqs = [[1] + q + [2] + tokens(d) + [2] for d in DOCS]
scores = [None] * len(DOCS)
for res in rank["results"]:
    scores[res["index"]] = res["relevance_score"]
json.dump({
    "note": "llama-server (llama.cpp v0.4.0 80fb11a) on testmodel.TinyBert and TinyBertReranker; embeddings L2-normalised by the server",
    "sequences": SEQS,
    "mean": embeddings(18931),
    "cls": embeddings(18933),
    "rerank": {"query": QUERY, "documents": DOCS, "sequences": rerank_seqs, "scores": scores},
}, open(1, "w"), indent=1)
