"""simulst: simultaneous speech translation by onlinizing offline models.

Docstrings cite the four papers by short names:

* "2022 paper" - Polák et al., *CUNI-KIT System for Simultaneous Speech Translation Task at IWSLT 2022*
  (onlinization: chunked incremental decoding, hold-n, LA-n, SP-n; LAAL).
* "IBWBS paper" - Polák et al., *Incremental Blockwise Beam Search for Simultaneous Speech Translation with
  Controllable Quality-Latency Tradeoff*, Interspeech 2023 (BWBS, IBWBS).
* "2023 paper" - Polák et al., *CUNI-KIT at IWSLT 2023* (improved IBWBS, the CTC online policy, joint CTC scoring).
* "CMU 2023" - Yan et al., *CMU's IWSLT 2023 Simultaneous Speech Translation System* (the rewinding beam step,
  speech output).

Layers (imports point one way, enforced by import-linter): ``cli`` → ``evaluation`` / ``ctc`` (training recipe) →
``streaming`` → ``mt`` / ``tts`` → ``policies`` → ``search`` → ``scorers`` → ``models`` → ``audio`` → ``config`` /
``types`` / ``sequences`` → ``errors``.
"""

__version__ = "0.1.0"
