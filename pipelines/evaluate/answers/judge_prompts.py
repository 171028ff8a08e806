"""The judges' prompt texts: the official ones verbatim, and the G-Eval prompts of ours for responses.

Official texts (each has a golden copy, with the repository, path and commit it came from, in
tests/evaluate/answers/golden/): LongMemEval's ``get_anscheck_prompt`` templates (xiaowu0162/LongMemEval
src/evaluation/evaluate_qa.py), mem0's ``ACCURACY_PROMPT`` (mem0ai/mem0 evaluation/metrics/llm_judge.py),
RealMem's ``QA_eval_prompt``, its input block and ``Mem_eval_prompt`` (zhiyuan5986/RealMemBench
eval/compute_llm_metrics_for_realmem.py). How each is filled and parsed: :mod:`pipelines.evaluate.answers.judges`.

G-Eval for responses (``GEVAL_TEMPLATE``, ``GEVAL_CRITERIA``): G-Long (seed 003, Appendix K) scores MSC/CC
responses with G-Eval on coherence, engagingness and fluency, gpt-4o judging session 5 with sessions 1-4 in
view; its prompt is only a figure, and its Table 2 puts all three on a 1-5 scale. G-Eval's repository
(nlpyang/geval) ships summarisation prompts only. So each prompt here is G-Eval's form (nlpyang/geval
prompts/summeval/*_detailed.txt: the task, "Please make sure you read ...", Evaluation Criteria, Evaluation
Steps, Example, "Evaluation Form (scores ONLY):") around the G-Eval paper's dialogue framing ("You will be given
a conversation between two individuals. ..."), the criterion texts as the comments of ``GEVAL_CRITERIA`` say,
on G-Long's 1-5 scale. The judge sees the dialogue so far (``item.question``) and the response, not the memory
(which differs between readers). Named ``geval_*``: not G-Long's exact prompt, which is not published as text.
"""

from __future__ import annotations

_LME_HEAD = ("I will give you a question, a correct answer, and a response from a model. Please answer yes if "
             "the response contains the correct answer. Otherwise, answer no. ")
_LME_STEPS = ("If the response is equivalent to the correct answer or contains all the intermediate steps to "
              "get the correct answer, you should also answer yes. If the response only contains a subset of "
              "the information required by the answer, answer no. ")
_LME_TAIL = ("\n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\n"
             "Is the model response correct? Answer yes or no only.")
LONGMEMEVAL_JUDGE = {
    "default": _LME_HEAD + _LME_STEPS + _LME_TAIL,
    "temporal-reasoning": _LME_HEAD + _LME_STEPS + (
        "In addition, do not penalize off-by-one errors for the number of days. If the question asks for the "
        "number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., predicting 19 days "
        "when the answer is 18), the model's response is still correct. ") + _LME_TAIL,
    "knowledge-update": _LME_HEAD + (
        "If the response contains some previous information along with an updated answer, the response should "
        "be considered as correct as long as the updated answer is the required answer.") + _LME_TAIL,
    "single-session-preference": (
        "I will give you a question, a rubric for desired personalized response, and a response from a model. "
        "Please answer yes if the response satisfies the desired response. Otherwise, answer no. The model "
        "does not need to reflect all the points in the rubric. The response is correct as long as it recalls "
        "and utilizes the user's personal information correctly.\n\nQuestion: {}\n\nRubric: {}\n\n"
        "Model Response: {}\n\nIs the model response correct? Answer yes or no only."),
    "abstention": (
        "I will give you an unanswerable question, an explanation, and a response from a model. Please answer "
        "yes if the model correctly identifies the question as unanswerable. The model could say that the "
        "information is incomplete, or some other information is given but the asked information is not.\n\n"
        "Question: {}\n\nExplanation: {}\n\nModel Response: {}\n\nDoes the model correctly identify the "
        "question as unanswerable? Answer yes or no only."),
}
LONGMEMEVAL_TYPES = ("single-session-user", "single-session-assistant", "multi-session", "temporal-reasoning",
                     "knowledge-update", "single-session-preference")

MEM0_ACCURACY_PROMPT = """
Your task is to label an answer to a question as \u2019CORRECT\u2019 or \u2019WRONG\u2019. You will be given \
the following data:
    (1) a question (posed by one user to another user), \n    (2) a \u2019gold\u2019 (ground truth) answer, \n\
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their \
prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it \
touches on the same topic as the gold answer, it should be counted as CORRECT. \n
For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer \
might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be \
generous with your grading - as long as it refers to the same date or time period as the gold answer, it \
should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if \
it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG. \n\
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""

REALMEM_QA_PROMPT = """Your task is to evaluate the consistency between the [candidate answer] and the \
[user-related memory].

You will be given four pieces of information:
1. The user\u2019s current query
2. The user-related memory, representing the latest valid user state
3. A reference answer based on the relevant memory
4. The candidate answer to be evaluated

Please follow these rules during evaluation:
- Focus only on whether \u201cfacts, constraints, preferences, and confirmed states\u201d are correctly used
- Do NOT evaluate language style, tone, politeness, empathy, or fluency
- Do NOT give a high score just because the answer \u201csounds reasonable\u201d
- The reference answer is only to help understand how relevant memory should ideally be used; a candidate \
answer does not need to exactly match the reference answer to receive a full score

Scoring criteria:
Score 0: Poor \u2014 the candidate answer conflicts with the user-related memory  \nScore 1: Fair \u2014 the \
candidate answer does not conflict with the relevant memory but is generic and not based on user memory  \n\
Score 2: Good \u2014 the candidate answer uses part of the user-related memory  \nScore 3: Very good \u2014 the \
candidate answer (like the reference answer) uses all of the user-related memory

Output format:
```json
{
    "score": int,
    "reason": str  # Briefly explain the reason for the score
}
```
"""
# appended to REALMEM_QA_PROMPT by concatenation (the official f-string; the prompt's own braces are literal)
REALMEM_QA_INPUT = ("\n\n### Input Data\n1. Query: {question}\n2. User-related Memory: {gt_memory}\n"
                    "3. Reference Answer: {gt_answer}\n4. Candidate Answer: {generated_answer}\n")
REALMEM_NO_MEMORY = "No specific memory annotation found."
REALMEM_MEMORY_PROMPT = """Your task is to evaluate the consistency between the [retrieved memory] and the \
[ground-truth memory], and whether the retrieved memory is helpful.

### Input Data
\u2022 <question>: {question}
\u2022 <groundtruth_memory>: {groundtruth_memory}
\u2022 <retrieved_memory>: {retrieved_memory}

---

### Evaluation Dimensions
#### 1. Memory Recall
Mem_recall: Semantics-aware memory recall calculation (0\u20131)  \nstep1: For each groundtruth_memory, check \
in sequence whether its semantics are contained in any retrieved_memory.  \nstep2: Count how many \
groundtruth_memory items are covered (hits_cnt).  \nstep3: Compute the final recall score as hits_cnt / total \
number of groundtruth_memory items.

#### 2. Memory Helpfulness
Mem_helpful_score: The helpfulness of the retrieved memory for answering the question  \nScore 0: \
retrieved_memory contains mutually conflicting or contradictory memories, which not only fail to help answer \
the question but may also cause confusion.  \nScore 1: retrieved_memory is somewhat helpful for answering the \
question (can provide partial supporting evidence).  \nScore 2: retrieved_memory is very helpful for \
answering the question (can provide comprehensive supporting evidence).

---

### Output Format
Please provide your evaluation results using the following structure:

```json
{{
  "Mem_recall": float,
  "Mem_helpful_score": int,
  "Mem_hits": list[str],  # List the matched groundtruth_memory items
  "Mem_helpful_reason": str  # Explain the reason for the score and list the retrieved_memory that helps \
answer the question
}}
```
"""

# --- G-Eval for responses (ours, in G-Eval's form) -------------------------------------------------------
GEVAL_TEMPLATE = (
    "You will be given a conversation between two individuals. You will then be given one potential response "
    "for the next turn in the conversation.\n\nYour task is to rate the responses on one metric.\n\n"
    "Please make sure you read and understand these instructions carefully. Please keep this document open "
    "while reviewing, and refer to it as needed.\n\nEvaluation Criteria:\n\n{criterion}\n\n"
    "Evaluation Steps:\n\n{steps}\n\n\nExample:\n\n\nConversation History:\n\n{history}\n\n"
    "Response:\n\n{response}\n\n\nEvaluation Form (scores ONLY):\n\n- {form}:")
GEVAL_CRITERIA: dict[str, tuple[str, str, str]] = {   # criterion -> (definition, steps, form field)
    # definition ours (G-Eval's coherence is about summaries); step 3 is G-Eval's coh_detailed.txt step 3
    "coherence": (
        "Coherence (1-5) - the collective quality of the response in the conversation. The response should "
        "follow from what was said before and fit the conversation history: it should stay on topic, answer "
        "what the other speaker said, and not contradict facts established earlier in the conversation.",
        "1. Read the conversation history carefully and identify its topic and the facts established so far.\n"
        "2. Read the response and compare it to the conversation history. Check if the response follows from "
        "the last turn, stays on topic and agrees with the facts established earlier.\n"
        "3. Assign a score for coherence on a scale of 1 to 5, where 1 is the lowest and 5 is the highest based "
        "on the Evaluation Criteria.", "Coherence"),
    # the G-Eval paper's dialogue engagingness (Appendix A), its 1-3 levels placed at 1, 3 and 5
    "engagingness": (
        "Engagingness (1-5) Is the response dull/interesting?\n"
        "- A score of 1 (dull) means that the response is generic and dull.\n"
        "- A score of 3 (somewhat interesting) means the response is somewhat interesting and could engage you "
        "in the conversation (e.g., an opinion, thought)\n"
        "- A score of 5 (interesting) means the response is very interesting or presents an interesting fact",
        "1. Read the conversation and the response carefully.\n"
        "2. Rate the response on a scale of 1-5 for engagingness, according to the criteria above.",
        "Engagingness"),
    # G-Eval's flu_detailed.txt with "summary" -> "response" and its levels 1, 2, 3 placed at 1, 3 and 5
    "fluency": (
        "Fluency (1-5): the quality of the response in terms of grammar, spelling, punctuation, word choice, and "
        "sentence structure.\n\n"
        "- 1: Poor. The response has many errors that make it hard to understand or sound unnatural.\n"
        "- 3: Fair. The response has some errors that affect the clarity or smoothness of the text, but the "
        "main points are still comprehensible.\n"
        "- 5: Good. The response has few or no errors and is easy to read and follow.",
        "1. Read the response carefully and check its grammar, spelling, punctuation, word choice and sentence "
        "structure.\n2. Assign a score for fluency on a scale of 1 to 5, where 1 is the lowest and 5 is the "
        "highest based on the Evaluation Criteria.", "Fluency (1-5)"),
}
