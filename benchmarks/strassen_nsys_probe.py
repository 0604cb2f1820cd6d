import cupy as cp, kronlinalg, time
n = 8192
a, b = (cp.random.default_rng(s).standard_normal((n, n)) for s in (1, 2))
f = lambda: kronlinalg.strassen_matmul(a, b, levels=1, algorithm="strassen_cublas")
for _ in range(3):
    f(); cp.matmul(a, b)
cp.cuda.Device().synchronize()
for i in range(4):
    cp.cuda.runtime.profilerStart() if i == 0 else None
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    cp.cuda.Device().synchronize()
    start.record(); f(); stop.record(); stop.synchronize()
    print("single", cp.cuda.get_elapsed_time(start, stop))
    time.sleep(0.01)
start, stop = cp.cuda.Event(), cp.cuda.Event()
start.record()
for i in range(4):
    f()
stop.record(); stop.synchronize()
print("queued", cp.cuda.get_elapsed_time(start, stop) / 4)
