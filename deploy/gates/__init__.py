"""The numeric gates every transforming stage applies: thresholds (tolerance), golden
inputs and references (references), parity against them (parity), the accuracy gate for
reduced precision (accuracy; its report, accuracy_report) and the automatic FP32 fallback
that makes it pass (fallback)."""
