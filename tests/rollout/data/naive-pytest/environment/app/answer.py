def answer():
    return 0
