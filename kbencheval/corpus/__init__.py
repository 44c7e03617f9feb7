"""SFT corpora: loaders (KernelBook, KernelLLM's corpus, Sakana's archive), verification, filtering.

    kbench corpus verify source=kernelbook path=GPUMODE/KernelBook out=corpus/kb
    kbench corpus filter verified=corpus/kb out=data/kb_sft decontam=[bundled]

docs/data.md walks from a raw corpus to an SFT-ready folder and a retrieval index.
"""

from kbencheval.corpus.records import CorpusError, CorpusRecord, load_corpus  # noqa: F401
