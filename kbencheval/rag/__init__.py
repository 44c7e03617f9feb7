"""RA-ICL: a FAISS index of solved corpus examples and a retriever for prompts (prompt_style=raicl).

    kbench rag build corpus=data/kb_sft out=indexes/kb model=BAAI/bge-code-v1
    kbench generate ... prompt_style=raicl raicl_index=indexes/kb raicl_k=2
"""
