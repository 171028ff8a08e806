"""MDR: Memory Distillation and Reproduction for Personalized Dialogue Generation (seed 001).

Stage A (teacher.py): teacher encoder-decoder, L_teacher. Stage B (student.py, memory_net.py):
student encoder, history selection, Memory Net P-/R-Update, L_sentence, cached R^(K). Stage C
(decoder.py, token_weights.py): decoder with adjusted token weights, L_token, generation.
tasks.py wraps the three stages as TrainTasks; pipelines.data.tasks builds the (P, H, Q, R) examples.
"""

from pipelines.mdr.config import MDRConfig

__all__ = ["MDRConfig"]
