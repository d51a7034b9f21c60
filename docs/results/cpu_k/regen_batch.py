import sys, torch, time
from hedgespec.models import load_target
kern, th = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(th)
model,tok=load_target("smollm2", linear_kernels=kern)
torch.manual_seed(0)
ids=torch.randint(0,49152,(16,120))
with torch.no_grad():
    model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
    t=time.perf_counter(); out=model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0); dt=time.perf_counter()-t
print(kern, th, 'batch16 x 32 new tokens: %.2f s'%dt, out[:, -32:].sum().item())
