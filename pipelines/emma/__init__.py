"""EMMA (seed 000, arXiv 2410.02503): the dialogue module's three task formats, the QLoRA
multi-task FLAN-T5 dialogue module and the dual-encoder memory retriever."""
