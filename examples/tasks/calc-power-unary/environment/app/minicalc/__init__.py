from minicalc.evaluator import CalcError, evaluate

__all__ = ["CalcError", "evaluate"]
