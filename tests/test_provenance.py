"""The host CPU that results.json and the benchmarks record beside their timings."""
import os
import platform

import jax

from lra_posenc.training import run_files

# Two processors of /proc/cpuinfo as Linux writes them: the first block is the one read; a field the
# first lacks is not taken from the second.
ZEN3_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu vme sse sse2 avx fma avx2 sha_ni vaes

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
microcode\t: 0xa0011d1
flags\t\t: fpu vme sse sse2 avx fma avx2 avx512f sha_ni vaes
"""
SAPPHIRE_RAPIDS_FLAGS = 'fpu avx fma avx2 avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8'
AARCH64_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd40
"""


def test_cpuinfo_gives_the_first_processors_model_family_and_vector_extensions():
  assert run_files.parse_cpuinfo(ZEN3_CPUINFO) == {
      'model': 'AMD EPYC', 'family': 25, 'model_number': 1, 'vector_extensions': ['avx2', 'fma']}
  intel = (f'cpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n'
           f'flags\t\t: {SAPPHIRE_RAPIDS_FLAGS}\n')
  assert run_files.parse_cpuinfo(intel) == {
      'model': 'Intel(R) Xeon(R) Platinum 8480+', 'family': 6, 'model_number': 143,
      'vector_extensions': ['avx2', 'fma', 'avx512f', 'avx512_bf16', 'amx_tile']}
  assert run_files.parse_cpuinfo(AARCH64_CPUINFO) == {}


def test_host_cpu_falls_back_to_the_platform_where_cpuinfo_has_no_model(tmp_path):
  arm = tmp_path / 'cpuinfo'
  arm.write_text(AARCH64_CPUINFO)
  expected = {'model': platform.processor() or platform.machine(), 'cores': os.cpu_count()}
  assert run_files.host_cpu(str(arm)) == expected
  assert run_files.host_cpu(str(tmp_path / 'absent')) == expected


def test_host_cpu_is_this_machines_and_describes_itself_in_one_line(tmp_path):
  cpuinfo = tmp_path / 'cpuinfo'
  cpuinfo.write_text(ZEN3_CPUINFO)
  zen3 = run_files.host_cpu(str(cpuinfo))
  assert run_files.describe_cpu(zen3) == f'AMD EPYC (family 25, model 1; avx2, fma), {os.cpu_count()} cores'
  assert run_files.describe_cpu(run_files.host_cpu(str(tmp_path / 'absent'))) == (
      f'{platform.processor() or platform.machine()}, {os.cpu_count()} cores')
  if os.path.isfile('/proc/cpuinfo'):  # Linux: the first 'model name' line, read here without the parser.
    with open('/proc/cpuinfo') as f:
      names = [line.split(':', 1)[1].strip() for line in f if line.startswith('model name')]
    assert run_files.host_cpu()['model'] == (names[0] if names else platform.processor() or platform.machine())
  assert run_files.host_cpu()['cores'] == os.cpu_count()


def test_the_matmul_precision_in_force_is_recorded():
  """A GPU's float32 figures depend on it (TF32 or full float32), so results.json says which was used."""
  # Unset (None) means the backend's default.
  assert run_files.provenance()['default_matmul_precision'] == os.environ.get('JAX_DEFAULT_MATMUL_PRECISION')
  with jax.default_matmul_precision('highest'):
    assert run_files.provenance()['default_matmul_precision'] == 'highest'
