import platform, time
import torch
print("cpu:", [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0],
      "| flags:", " ".join(sorted({f for l in open("/proc/cpuinfo") if l.startswith("flags") for f in l.split()[2:]
                                   if f.startswith(("avx512", "amx", "avx2"))})),
      "| torch", torch.__version__, "| cpu capability", torch.backends.cpu.get_cpu_capability(), "| threads", torch.get_num_threads())
torch.manual_seed(0)
for dt in (torch.float32, torch.bfloat16):
    a = torch.randn(256, 576, dtype=dt)
    w = torch.randn(576, 4096, dtype=dt, requires_grad=True)
    for _ in range(3):
        (a @ w).sum().backward()
    t = time.perf_counter()
    for _ in range(20):
        (a @ w).sum().backward()
    print(f"{str(dt):15s} {(time.perf_counter() - t) / 20 * 1e3:8.1f} ms per forward+backward of [256, 576] @ [576, 4096] (a draft lm_head's shape)")
