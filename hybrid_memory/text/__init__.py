"""Text processing shared by the read and write paths: tokenisation, dates, PII, token counts, the bilingual rule vocabulary."""
