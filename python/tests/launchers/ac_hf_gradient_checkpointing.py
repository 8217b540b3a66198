"""Hugging Face's own activation checkpointing (gradient_checkpointing_enable, its
default reentrant checkpoint) of a Llama under tensor parallelism inside FSDP2.
Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2, "tp": 2}
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def model():
    m = tiny.builder()()
    m.gradient_checkpointing_enable()
    m.train()
    return m


parallelize = tiny.family_parallelize("llama", "tp_fsdp")
