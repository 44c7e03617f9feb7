"""Rollout engines behind one interface: generate_ids, update_weights, weights_version, state_dict.

`smart.rollout.engine.EngineActor` is the embedded transformers engine; `engines.sglang` talks to
running SGLang servers over HTTP (no sglang import: only its documented routes).
"""
