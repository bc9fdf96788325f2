PRAGMA application_id = 1094800212;
PRAGMA user_version = 6;
BEGIN TRANSACTION;
CREATE TABLE "calibrations" (  device TEXT NOT NULL CONSTRAINT calibration_device_length CHECK (length(device) BETWEEN 1 AND 127),  backend TEXT NOT NULL CONSTRAINT calibration_backend_known CHECK (backend IN    ('shm', 'nccl', 'gloo', 'self', 'nccl-hosts')),  json TEXT NOT NULL CONSTRAINT calibration_is_json CHECK (json_valid(json)),  measured_at INTEGER NOT NULL,  updated_at INTEGER NOT NULL,  PRIMARY KEY (device, backend));
INSERT INTO "calibrations" VALUES('cpu:AMD EPYC (1 threads):24105MiB','shm','{"version":1,"device":"cpu:AMD EPYC (1 threads):24105MiB","backend":"shm","cuda":0,"threads":1,"host_cores":2,"ranks":2,"measured_s":0.22041736100027265,"ops":[["layernorm",[16,16,0,0],"fp32",5.5859550229797605e-7,5.5880678928588168e-7],["matmul",[16,16,24,0],"fp32",2.2681069822283462e-7,7.3262617661384866e-7],["attention",[1,16,8,1],"fp32",1.7373960190525395e-6,1.8961991372634657e-6],["matmul",[16,8,16,0],"fp32",1.1430632440578847e-7,6.0322815897961846e-7],["residual",[256,0,0,0],"fp32",2.8176930300105596e-7,5.6408947557429201e-7],["matmul",[16,16,16,0],"fp32",1.6814290404454368e-7,6.6887582761410158e-7],["gelu",[256,0,0,0],"fp32",3.8191748785720847e-7,4.0432504988530127e-7],["encoder",[16,16,0,0],"fp32",3.1726921179142664e-7,3.2812494055178831e-7],["matmul",[16,16,128,0],"fp32",9.1292213255655952e-7,1.9240480924054282e-6],["xent",[16,128,0,0],"fp32",5.7635834309621714e-6,3.4836034501495305e-7],["adamw",[4656,0,0,0],"fp32",1.1891676876985002e-5,0.0],["cast",[256,0,0,0],"fp32",2.8984936761844438e-7,2.7830162707687123e-7],["cast",[384,0,0,0],"fp32",2.9645269705724786e-7,2.8019087494612904e-7],["cast",[128,0,0,0],"fp32",2.8389121098371106e-7,2.7734637342291535e-7],["cast",[1160,0,0,0],"fp32",3.401664798730053e-7,2.9993981343068299e-7],["cast",[2048,0,0,0],"fp32",3.734583060577279e-7,3.1366536745736084e-7],["cast",[4656,0,0,0],"fp32",4.8387158813056885e-7,3.6399788427843305e-7],["cast",[2304,0,0,0],"fp32",3.8254412970673002e-7,3.1800396982362145e-7],["cast",[32,0,0,0],"fp32",2.7670751023833873e-7,2.7482280984258978e-7],["adamw",[1164,0,0,0],"fp32",3.2154730433830991e-6,0.0],["cast",[1164,0,0,0],"fp32",3.426007992857194e-7,3.0327532840601634e-7],["layernorm",[8,16,0,0],"fp32",4.2601942595865694e-7,4.1096268432738725e-7],["residual",[128,0,0,0],"fp32",2.8132569696026621e-7,5.6217447763629025e-7],["matmul",[16,16,48,0],"fp32",3.9023234421620145e-7,1.0181770448980387e-6],["attention",[1,16,16,2],"fp32",2.9880029615014791e-6,3.1555939585814485e-6],["matmul",[16,16,32,0],"fp32",2.7763269372371724e-7,8.7109339119706419e-7],["gelu",[512,0,0,0],"fp32",4.7229929123204784e-7,5.1739453965637949e-7],["matmul",[16,32,16,0],"fp32",2.8401478857631446e-7,8.6217892203421798e-7],["adamw",[6576,0,0,0],"fp32",1.6582269381615333e-5,0.0],["matmul",[16,16,256,0],"fp32",1.7968094425668824e-6,3.5153500448359409e-6],["xent",[16,256,0,0],"fp32",9.9492690424085595e-6,4.2584267134770926e-7],["adamw",[6608,0,0,0],"fp32",1.668515324126929e-5,0.0],["cast",[768,0,0,0],"fp32",3.16645468956267e-7,2.891447365982458e-7],["cast",[512,0,0,0],"fp32",3.0246366122810286e-7,2.8350305569802003e-7],["cast",[2224,0,0,0],"fp32",3.8083658182586078e-7,3.2144970418812591e-7],["cast",[6576,0,0,0],"fp32",5.6547844451415585e-7,4.0216599472842063e-7],["cast",[4352,0,0,0],"fp32",4.69707430283961e-7,3.6106359857512871e-7],["cast",[4096,0,0,0],"fp32",4.5906858758826274e-7,3.4878510746239044e-7],["cast",[6608,0,0,0],"fp32",5.7031797950912733e-7,4.0246987964565051e-7],["adamw",[1644,0,0,0],"fp32",4.4124935811851174e-6,0.0],["adamw",[1652,0,0,0],"fp32",4.2831215978367254e-6,0.0],["layernorm",[32,16,0,0],"fp32",7.6429813589129481e-7,7.7595171887878678e-7],["matmul",[32,16,24,0],"fp32",3.7287887266757025e-7,1.0585116569927777e-6],["attention",[2,16,8,1],"fp32",2.8895610739709809e-6,3.1763022434461163e-6],["matmul",[32,8,16,0],"fp32",1.8913205224180274e-7,7.0222461090452271e-7],["residual",[512,0,0,0],"fp32",3.0019464247743599e-7,5.901814574826858e-7],["matmul",[32,16,16,0],"fp32",2.8461988677008776e-7,9.1929155132675078e-7],["encoder",[32,16,0,0],"fp32",3.4653572811293998e-7,3.7998404422978638e-7],["adamw",[3464,0,0,0],"fp32",9.3714334070682526e-6,0.0],["matmul",[32,16,128,0],"fp32",1.5337598142650677e-6,3.3674723454168998e-6],["xent",[32,128,0,0],"fp32",1.1057160008931533e-5,4.6418534793701838e-7],["adamw",[3496,0,0,0],"fp32",9.2444997790153138e-6,0.0],["cast",[3464,0,0,0],"fp32",4.5108362201062846e-7,3.5703308753909369e-7],["cast",[3496,0,0,0],"fp32",4.5160487616158207e-7,3.580491352295212e-7],["adamw",[1732,0,0,0],"fp32",4.7469370656472165e-6,0.0],["adamw",[1748,0,0,0],"fp32",4.7338153308373876e-6,0.0],["adamw",[8832,0,0,0],"fp32",2.1736334019806236e-5,0.0],["cast",[8832,0,0,0],"fp32",6.9048792283865623e-7,5.8541581893223338e-7],["adamw",[2208,0,0,0],"fp32",5.9758131101261824e-6,0.0],["cast",[2208,0,0,0],"fp32",3.9618646496819565e-7,3.3326779202980106e-7],["adamw",[2328,0,0,0],"fp32",6.3978841353673488e-6,0.0],["cast",[2328,0,0,0],"fp32",4.0818275692799943e-7,3.4412119020998944e-7],["matmul",[32,16,48,0],"fp32",6.6659299591265153e-7,1.5489263205381576e-6],["attention",[2,16,16,2],"fp32",5.3125913836993277e-6,5.5968184824450873e-6],["matmul",[32,16,32,0],"fp32",4.5561486672340834e-7,1.2629318462131778e-6],["gelu",[1024,0,0,0],"fp32",6.7495437860998209e-7,7.6516448643815238e-7],["matmul",[32,32,16,0],"fp32",4.7872242703306256e-7,1.2715640878013801e-6],["matmul",[32,16,256,0],"fp32",3.0185315154085401e-6,6.3386041802004911e-6],["xent",[32,256,0,0],"fp32",1.9812574464594945e-5,6.6200959736306686e-7],["cast",[1536,0,0,0],"fp32",3.6828924976362032e-7,3.1969182145985542e-7],["cast",[1024,0,0,0],"fp32",3.5779700624516408e-7,3.101719698861416e-7],["cast",[8192,0,0,0],"fp32",6.6453804947741446e-7,5.1506270892787143e-7],["adamw",[3288,0,0,0],"fp32",8.5591109382221475e-6,0.0],["adamw",[3304,0,0,0],"fp32",8.6273066699504852e-6,0.0],["layernorm",[64,16,0,0],"fp32",1.232963086295058e-6,1.2995037650398444e-6],["matmul",[64,16,24,0],"fp32",6.6107020302297315e-7,1.6506642168678809e-6],["attention",[4,16,8,1],"fp32",5.1585157052613795e-6,5.6792823670548387e-6],["matmul",[64,8,16,0],"fp32",3.3774580288081779e-7,1.0191607771048439e-6],["residual",[1024,0,0,0],"fp32",3.1254347732101451e-7,6.1086745972716017e-7],["matmul",[64,16,16,0],"fp32",5.0409198593115434e-7,1.3816102182317991e-6],["encoder",[64,16,0,0],"fp32",4.2642400899239874e-7,4.8256288209813647e-7],["matmul",[64,16,128,0],"fp32",2.7858604880748317e-6,6.1441915022442117e-6],["xent",[64,128,0,0],"fp32",2.1592848497675732e-5,7.0153896558622364e-7],["adamw",[4416,0,0,0],"fp32",1.1274711141595617e-5,0.0],["cast",[4416,0,0,0],"fp32",4.9439199756307062e-7,3.7306659805835807e-7],["matmul",[64,16,48,0],"fp32",1.1718757377821021e-6,2.6370428258815082e-6],["attention",[4,16,16,2],"fp32",1.0044135706266388e-5,1.0615922292345203e-5],["matmul",[64,16,32,0],"fp32",8.1287743114444311e-7,2.0453169327083742e-6],["gelu",[2048,0,0,0],"fp32",1.0510646006878233e-6,1.2209995929879369e-6],["matmul",[64,32,16,0],"fp32",8.5872727595415199e-7,1.9977792362624314e-6],["matmul",[64,16,256,0],"fp32",5.4018255468690768e-6,1.2355449143797159e-5],["xent",[64,256,0,0],"fp32",3.9300983189605176e-5,1.0142091468878789e-6],["cast",[3072,0,0,0],"fp32",4.376675803996477e-7,3.5096326200800831e-7],["cast",[16384,0,0,0],"fp32",1.003121951725916e-6,8.4646313780467608e-7]],"links":[["all_reduce",2,6.1407483130667849e-7,15894164900.18252],["all_gather",2,2.523056667517209e-7,22566061141.391335],["reduce_scatter",2,2.3739070323276094e-7,13943701473.202166],["send",2,4.8863832709986876e-7,36456252375.539474]]}',1795887407,1795887407);
CREATE TABLE hardware (  fingerprint TEXT PRIMARY KEY    CONSTRAINT hardware_fingerprint_length CHECK (length(fingerprint) BETWEEN 1 AND 127),  description TEXT NOT NULL CONSTRAINT hardware_description_is_json CHECK (json_valid(description)),  created_at INTEGER NOT NULL);
INSERT INTO "hardware" VALUES('cpu:AMD EPYC (1 threads):24105MiBx2','{"devices":[{"kind":"cpu","name":"AMD EPYC (1 threads)","index":0,"memory":25276502016,"host":"vm"}],"world":2,"hosts":1}',1795887406);
CREATE TABLE jobs (  id INTEGER PRIMARY KEY,  model_hash TEXT NOT NULL REFERENCES models(hash),  hardware TEXT NOT NULL REFERENCES hardware(fingerprint),  status TEXT NOT NULL CONSTRAINT job_status_known CHECK (status IN    ('queued', 'running', 'done', 'failed', 'cancelled', 'interrupted')),  options_json TEXT    CONSTRAINT job_options_is_json CHECK (options_json IS NULL OR json_valid(options_json)),  best_run_id INTEGER REFERENCES runs(id),  from_store INTEGER NOT NULL DEFAULT 0 CONSTRAINT job_from_store_bool CHECK (from_store IN (0, 1)),  error TEXT,  submitted_at INTEGER NOT NULL,  started_at INTEGER,  finished_at INTEGER, resumes INTEGER NOT NULL DEFAULT 0  CONSTRAINT job_resumes_not_negative CHECK (resumes >= 0), note TEXT);
INSERT INTO "jobs" VALUES(1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','done','{"train":false,"refresh":false,"exhaustive":true,"time_limit_s":0,"max_dryruns":0,"exclude":["fp16","bf16","checkpoint","zero2","zero3"],"include":[],"from":null,"out_dir":null,"owner_uid":0,"spec":{"name":"compat","model":{"family":"gpt2","n_layer":2,"n_head":2,"d_model":16,"d_ff":32,"seq_len":16,"vocab_size":256,"n_kv_head":2,"rope_theta":10000.0,"norm_eps":9.9999997473787516e-6},"train":{"global_batch":4,"steps":3,"lr":0.0030000000260770321,"min_lr":0.00030000001424923539,"warmup_steps":0,"schedule":"cosine","weight_decay":0.10000000149011612,"beta1":0.89999997615814209,"beta2":0.94999998807907104,"eps":9.9999999392252903e-9,"grad_clip":1.0,"seed":7,"eval_every":0,"eval_batches":8,"checkpoint_every":0},"data":{"train":"data/train.bin","val":"data/val.bin"}}}',9,0,NULL,1795887406,1795887406,1795887407,0,'best dp1.tp1.pp1.z0.fp32.ckpt-none.mb4, within the noise of dp1.tp2.pp1.z0.fp32.ckpt-none.mb4 (1.01×, spread 33 %, 1 and 1 runs): kept the faster mean');
CREATE TABLE models (  hash TEXT PRIMARY KEY CONSTRAINT model_hash_length CHECK (length(hash) BETWEEN 1 AND 64),  name TEXT NOT NULL DEFAULT '',  spec_json TEXT NOT NULL CONSTRAINT model_spec_is_json CHECK (json_valid(spec_json)),  params INTEGER NOT NULL DEFAULT 0 CONSTRAINT model_params_not_negative CHECK (params >= 0),  created_at INTEGER NOT NULL);
INSERT INTO "models" VALUES('558a67ad089b4379','compat','{"family":"gpt2","n_layer":2,"n_head":2,"d_model":16,"d_ff":32,"seq_len":16,"vocab_size":256}',8832,1795887406);
CREATE TABLE run_ranks (  run_id INTEGER NOT NULL REFERENCES runs(id),  rank INTEGER NOT NULL CONSTRAINT run_rank_in_world CHECK (rank BETWEEN 0 AND 4095),  dp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_dp_in_world CHECK (dp_rank BETWEEN 0 AND 4095),  tp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_tp_in_world CHECK (tp_rank BETWEEN 0 AND 4095),  pp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_pp_in_world CHECK (pp_rank BETWEEN 0 AND 4095),  status TEXT NOT NULL CONSTRAINT run_rank_status_known CHECK (status IN    ('ok', 'oom', 'error', 'timeout', 'crashed', 'cancelled')),  tokens_per_s REAL,  step_ms_median REAL,  step_ms_spread REAL,  forward_ms REAL,  backward_ms REAL,  optimizer_ms REAL,  pipeline_comm_ms REAL,  bubble_ms REAL,  peak_bytes INTEGER,  peak_json TEXT CONSTRAINT run_rank_peak_is_json CHECK (peak_json IS NULL OR json_valid(peak_json)),  error TEXT,  PRIMARY KEY (run_id, rank)) WITHOUT ROWID;
INSERT INTO "run_ranks" VALUES(1,0,0,0,0,'ok',1.46079033352198341165e+05,4.381189999094203813e-01,3.46647999776905635371e-01,4.79415000427252380177e-02,8.65140000314568169414e-02,3.00858999935371684841e-01,0.0,2.8044998998666414991e-03,240576,'{"params":35328,"grads":35328,"optim":35328,"acts":87936,"workspace":46656,"total":240576}',NULL);
INSERT INTO "run_ranks" VALUES(1,1,1,0,0,'ok',2.28711922872894036118e+05,2.79828000202542170882e-01,4.42860000475775450468e-02,4.82069999634404666721e-02,1.58026000008248956874e-01,6.85620000240305671468e-02,0.0,0.00503300020682218,240576,'{"params":35328,"grads":35328,"optim":35328,"acts":87936,"workspace":46656,"total":240576}',NULL);
INSERT INTO "run_ranks" VALUES(2,0,0,0,0,'ok',1.06800166866308019961e+05,5.99250000050233211368e-01,3.98725999730231706053e-01,1.36348499836458358913e-01,1.57655499833708745427e-01,3.02646499903858057223e-01,0.0,0.00259950047620805,193856,'{"params":18624,"grads":18624,"optim":37248,"acts":88064,"workspace":31296,"total":193856}',NULL);
INSERT INTO "run_ranks" VALUES(2,1,0,1,0,'ok',1.64460582123945234342e+05,3.89151000035781180486e-01,7.98379996922449208796e-02,1.78371499941931688226e-01,1.19077499903141870163e-01,8.67749999997613485902e-02,0.0,4.92700019094627350568e-03,193856,'{"params":18624,"grads":18624,"optim":37248,"acts":88064,"workspace":31296,"total":193856}',NULL);
INSERT INTO "run_ranks" VALUES(3,0,0,0,0,'ok',3.19338968508142395869e+05,2.00413999891679850406e-01,1.51675999859435250982e-01,6.10714998856565216556e-02,1.00866000138921663165e-01,3.50370003161515342071e-02,0.0,3.43949955095013137906e-03,249792,'{"params":35328,"grads":35328,"optim":70656,"acts":87936,"workspace":20544,"total":249792}',NULL);
INSERT INTO "run_ranks" VALUES(3,1,1,0,0,'ok',3.20009600630629807704e+05,1.99993999785874621011e-01,1.52498000261402921751e-01,6.16170000284910202026e-02,9.89574998584430431947e-02,3.57235001047229161486e-02,0.0,3.69599979421764146536e-03,249792,'{"params":35328,"grads":35328,"optim":70656,"acts":87936,"workspace":20544,"total":249792}',NULL);
INSERT INTO "run_ranks" VALUES(4,0,0,0,0,'ok',1.4407648665112059098e+05,4.44208499857268179766e-01,2.36162999954103725031e-01,5.82919997214048635214e-02,9.79015001121297245845e-02,2.8528599978017155081e-01,0.0,2.72900024356204085052e-03,186368,'{"params":35328,"grads":35328,"optim":35328,"acts":43968,"workspace":36416,"total":186368}',NULL);
INSERT INTO "run_ranks" VALUES(4,1,1,0,0,'ok',1.95390315009417157854e+05,3.27549500070745125412e-01,6.11109999226755462586e-02,5.65539999115571845322e-02,1.98802000340947415679e-01,6.79569998283113818615e-02,0.0,4.23649998992914333939e-03,186368,'{"params":35328,"grads":35328,"optim":35328,"acts":43968,"workspace":36416,"total":186368}',NULL);
INSERT INTO "run_ranks" VALUES(5,0,0,0,0,'ok',3.48214990320211334614e+05,1.83794499889700091443e-01,5.96089998907700646668e-02,8.27589999516931129619e-02,4.54875000741594703868e-02,5.18480001119314692914e-02,0.0,3.69999975191603880375e-03,211264,'{"params":18624,"grads":18624,"optim":37248,"acts":109824,"workspace":26944,"total":211264}',NULL);
INSERT INTO "run_ranks" VALUES(5,1,0,1,0,'ok',3.48557299591103335843e+05,1.83613999979570508003e-01,6.04500000918051227927e-02,8.25735000944405328482e-02,4.51369999154849210754e-02,5.2378499958649626933e-02,0.0,3.52500001099542714655e-03,211264,'{"params":18624,"grads":18624,"optim":37248,"acts":109824,"workspace":26944,"total":211264}',NULL);
INSERT INTO "run_ranks" VALUES(6,0,0,0,0,'ok',2.40871805405085033274e+05,2.65701499984061229042e-01,1.10774999939167173579e-01,1.351419998627534369e-01,5.91985001392458798363e-02,6.78760002301714848726e-02,0.0,3.48499975189042743295e-03,142912,'{"params":18624,"grads":18624,"optim":37248,"acts":54912,"workspace":13504,"total":142912}',NULL);
INSERT INTO "run_ranks" VALUES(6,1,0,1,0,'ok',2.40635880146321025677e+05,2.65962000185027136467e-01,1.11075999939203029498e-01,1.35127000476131797768e-01,5.93434997426811605691e-02,6.79565000609727576375e-02,0.0,3.53499990524142049252e-03,142912,'{"params":18624,"grads":18624,"optim":37248,"acts":54912,"workspace":13504,"total":142912}',NULL);
INSERT INTO "run_ranks" VALUES(7,0,0,0,0,'ok',75170.6608783648,8.51396000143722631037e-01,4.79766000353265553712e-01,2.39431999943917617201e-01,2.66528000111065921373e-01,3.42416499961473164148e-01,0.0,3.01950012726592831313e-03,108736,'{"params":18624,"grads":18624,"optim":37248,"acts":27456,"workspace":6784,"total":108736}',NULL);
INSERT INTO "run_ranks" VALUES(7,1,0,1,0,'ok',1.06313351936448263583e+05,6.01994000135164242237e-01,7.98099999883561395108e-02,2.72797499519583652727e-01,2.36132500276653445325e-01,0.0870904998464539,0.0,5.97350049247324932366e-03,108736,'{"params":18624,"grads":18624,"optim":37248,"acts":27456,"workspace":6784,"total":108736}',NULL);
INSERT INTO "run_ranks" VALUES(8,0,0,0,0,'ok',3.16350110792798514002e+05,2.02307499876042129471e-01,1.24876999507250729948e-01,5.45319999218918383121e-02,1.103044999126723269e-01,3.41764998665894381701e-02,0.0,3.29450017488852608948e-03,195584,'{"params":35328,"grads":35328,"optim":70656,"acts":43968,"workspace":10304,"total":195584}',NULL);
INSERT INTO "run_ranks" VALUES(8,1,1,0,0,'ok',3.15929251266958366611e+05,2.02577000209203106351e-01,1.24515999686991563066e-01,5.45610002973262453451e-02,1.0901349992309405934e-01,3.52724998720077564939e-02,0.0,3.73000011677504517138e-03,195584,'{"params":35328,"grads":35328,"optim":70656,"acts":43968,"workspace":10304,"total":195584}',NULL);
INSERT INTO "run_ranks" VALUES(9,0,0,0,0,'ok',3.50765655798934050842e+05,1.82457999926555203273e-01,6.37999983155168592929e-03,8.42060001104982802644e-02,6.15564997588080586865e-02,3.35199997607560362666e-02,0.0,3.17550029649282805621e-03,358144,'{"params":35328,"grads":35328,"optim":70656,"acts":175872,"workspace":40960,"total":358144}',NULL);
INSERT INTO "run_ranks" VALUES(10,0,0,0,0,'ok',3.17245515804458875206e+05,2.01736500002880347892e-01,6.68099983158754184842e-03,9.25730000744806602597e-02,7.25185000192141160368e-02,0.0333799996496964,0.0,3.26500025948917027562e-03,249728,'{"params":35328,"grads":35328,"optim":70656,"acts":87936,"workspace":20480,"total":249728}',NULL);
INSERT INTO "run_ranks" VALUES(11,0,0,0,0,'ok',2.70850173366503440782e+05,2.36292999943543691188e-01,6.23000050836708396673e-03,1.08936999595243833027e-01,9.08760005131625803187e-02,3.31950000145297963172e-02,0.0,3.28499982060748152434e-03,195520,'{"params":35328,"grads":35328,"optim":70656,"acts":43968,"workspace":10240,"total":195520}',NULL);
INSERT INTO "run_ranks" VALUES(12,0,0,0,0,'ok',2.59152329247799323636e+05,2.46958999696289538405e-01,9.62839999374409671872e-02,3.02164996810461161658e-02,3.94630001210316549986e-02,4.30950001373275881633e-02,1.02204996892396593466e-02,1.23964000067644519731e-01,142912,'{"params":26304,"grads":26304,"optim":52608,"acts":26368,"workspace":11328,"total":142912}',NULL);
INSERT INTO "run_ranks" VALUES(12,1,0,0,1,'ok',2.59943868457196949743e+05,2.46206999918285873718e-01,9.51619999796093907207e-02,1.19498499998371698893e-01,3.68784999409399461001e-02,4.23530000261962413787e-02,1.96955002138565760105e-02,2.77814997389214113354e-02,149376,'{"params":26432,"grads":26432,"optim":52864,"acts":32320,"workspace":11328,"total":149376}',NULL);
INSERT INTO "run_ranks" VALUES(13,0,0,0,0,'ok',2.54624518487587425631e+05,0.251350499866021,1.05587000234663719311e-01,3.0704999744557426311e-02,3.83874994440702721476e-02,4.25839996296417666599e-02,0.0481924998894101,9.14815011583414161577e-02,168256,'{"params":26304,"grads":26304,"optim":52608,"acts":51712,"workspace":11328,"total":168256}',NULL);
INSERT INTO "run_ranks" VALUES(13,1,0,0,1,'ok',2.54949607774210569924e+05,2.51029999844831763766e-01,1.12637999791331822052e-01,1.24390499422588618472e-01,3.64185000307770678773e-02,4.47420000000420259311e-02,2.0901499965475522913e-02,2.45775004259485285729e-02,189440,'{"params":26432,"grads":26432,"optim":52864,"acts":72384,"workspace":11328,"total":189440}',NULL);
INSERT INTO "run_ranks" VALUES(14,0,0,0,0,'ok',2.83490027797098155136e+05,2.25757500174950109794e-01,8.01589994807727634906e-02,2.28890003199921920895e-02,2.93389998660131823271e-02,4.2353500020908541046e-02,1.00250003924884367734e-02,1.21150999575547757558e-01,180544,'{"params":26304,"grads":26304,"optim":52608,"acts":52736,"workspace":22592,"total":180544}',NULL);
INSERT INTO "run_ranks" VALUES(14,1,0,0,1,'ok',2.8365462365626124665e+05,2.25626500196085544303e-01,8.18429998616920784115e-02,8.48165000206790864467e-02,5.05049999901530100032e-02,4.30589998359209857881e-02,2.44819996169098885729e-02,2.27640007324225734919e-02,192960,'{"params":26432,"grads":26432,"optim":52864,"acts":64640,"workspace":22592,"total":192960}',NULL);
INSERT INTO "run_ranks" VALUES(15,0,0,0,0,'ok',2.82606247825062251643e+05,2.26463499984674854204e-01,7.99290000941255129873e-02,4.49270000899559818208e-02,2.92735001039545750245e-02,4.29794999945443123579e-02,0.00968450012805988,0.0995989996681601,180544,'{"params":26304,"grads":26304,"optim":52608,"acts":52736,"workspace":22592,"total":180544}',NULL);
INSERT INTO "run_ranks" VALUES(15,1,0,0,1,'ok',2.82587530317027354614e+05,2.26478500053417519666e-01,8.16830001895141322165e-02,1.01642000117863062769e-01,2.85374997019971488043e-02,4.27889997354213846847e-02,2.48569997438607970252e-02,2.86530007542751263827e-02,218304,'{"params":26432,"grads":26432,"optim":52864,"acts":89984,"workspace":22592,"total":218304}',NULL);
INSERT INTO "run_ranks" VALUES(16,0,0,0,0,'ok',2.5290145147165987874e+05,2.5306299994554137811e-01,1.35934000354609452188e-01,1.03775500065239612013e-01,6.72200001190503826364e-02,7.86324999353382736444e-02,0.0,0.00343499982591311,134336,'{"params":18624,"grads":18624,"optim":37248,"acts":44032,"workspace":15808,"total":134336}',NULL);
INSERT INTO "run_ranks" VALUES(16,1,0,1,0,'ok',2.52716704538791411328e+05,2.53248000035455334e-01,1.33940000068832887336e-01,1.04120499827331514097e-01,6.74410002829972654581e-02,0.0780515001679305,0.0,3.63499975719605572521e-03,134336,'{"params":18624,"grads":18624,"optim":37248,"acts":44032,"workspace":15808,"total":134336}',NULL);
INSERT INTO "run_ranks" VALUES(17,0,0,0,0,'ok',7.07181539131751487736e+04,9.05000999864569166675e-01,4.50112000180524773895e-01,2.46908500457720947451e-01,3.48450499359387322328e-01,3.06608000073538278229e-01,0.0,3.0339999739226186648e-03,104576,'{"params":18624,"grads":18624,"optim":37248,"acts":22016,"workspace":8064,"total":104576}',NULL);
INSERT INTO "run_ranks" VALUES(17,1,0,1,0,'ok',92619.1911074729,6.91001500172205851413e-01,3.82969997190230060368e-02,3.04138999808856169693e-01,2.95501499749661888927e-01,8.54375000471918610855e-02,0.0,5.92350056649593170732e-03,104576,'{"params":18624,"grads":18624,"optim":37248,"acts":22016,"workspace":8064,"total":104576}',NULL);
CREATE TABLE runs (  id INTEGER PRIMARY KEY,  job_id INTEGER NOT NULL REFERENCES jobs(id),  model_hash TEXT NOT NULL REFERENCES models(hash),  hardware TEXT NOT NULL REFERENCES hardware(fingerprint),  kind TEXT NOT NULL CONSTRAINT run_kind_known CHECK (kind IN ('dryrun', 'train')),  strategy_key TEXT NOT NULL CONSTRAINT run_key_not_empty CHECK (length(strategy_key) >= 1),  strategy_json TEXT NOT NULL CONSTRAINT run_strategy_is_json CHECK (json_valid(strategy_json)),  status TEXT NOT NULL CONSTRAINT run_status_known CHECK (status IN    ('queued', 'running', 'ok', 'oom', 'error', 'timeout', 'crashed', 'pruned', 'cancelled')),  tokens_per_s REAL,  step_ms_median REAL,  step_ms_spread REAL,  peak_bytes INTEGER,  peak_json TEXT CONSTRAINT run_peak_is_json CHECK (peak_json IS NULL OR json_valid(peak_json)),  predicted_tokens_per_s REAL,  final_loss REAL,  error TEXT,  started_at INTEGER,  finished_at INTEGER, predicted_peak_bytes INTEGER  CONSTRAINT run_predicted_peak_positive CHECK (predicted_peak_bytes IS NULL OR predicted_peak_bytes > 0), predicted_bubble REAL  CONSTRAINT run_predicted_bubble_share CHECK (predicted_bubble IS NULL OR  (predicted_bubble > 0 AND predicted_bubble < 1)), predicted_json TEXT  CONSTRAINT run_predicted_is_json CHECK (predicted_json IS NULL OR json_valid(predicted_json)),  CONSTRAINT run_ok_has_throughput CHECK (status <> 'ok' OR tokens_per_s > 0));
INSERT INTO "runs" VALUES(1,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp2.tp1.pp1.z1.fp32.ckpt-none.mb2','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 2,
    "tensor": 1,
    "pipeline": 1
  },
  "zero": 1,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 2,
  "schedule": "1f1b",
  "key": "dp2.tp1.pp1.z1.fp32.ckpt-none.mb2"
}
','ok',1.46079033352198341165e+05,4.381189999094203813e-01,3.46647999776905635371e-01,240576,'{"params":35328,"grads":35328,"optim":35328,"acts":87936,"workspace":46656,"total":240576}',6.61100304057423258192e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,240576,NULL,'{"forward_ms":0.043946102834979683,"backward_ms":0.036350475795643433,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011274711141595617,"data_comm_ms":0.005237015423237585,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(2,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb4','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 2,
    "pipeline": 1,
    "sequence_parallel": true
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 4,
  "schedule": "1f1b",
  "key": "dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb4"
}
','ok',1.06800166866308019961e+05,5.99250000050233211368e-01,3.98725999730231706053e-01,193856,'{"params":18624,"grads":18624,"optim":37248,"acts":88064,"workspace":31296,"total":193856}',1.32791147688530239976e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,193856,NULL,'{"forward_ms":0.045508342367384103,"backward_ms":0.037323762342111877,"tensor_comm_ms":0.011771748345883149,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011891676876985002,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(3,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp2.tp1.pp1.z0.fp32.ckpt-none.mb2','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 2,
    "tensor": 1,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 2,
  "schedule": "1f1b",
  "key": "dp2.tp1.pp1.z0.fp32.ckpt-none.mb2"
}
','ok',3.19338968508142395869e+05,2.00413999891679850406e-01,1.52498000261402921751e-01,249792,'{"params":35328,"grads":35328,"optim":70656,"acts":87936,"workspace":20544,"total":249792}',1.31763336867841862837e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,249792,NULL,'{"forward_ms":0.043946102834979683,"backward_ms":0.036350475795643433,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.021736334019806236,"data_comm_ms":0.0052933283175031366,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(4,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp2.tp1.pp1.z1.fp32.ckpt-none.mb1','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 2,
    "tensor": 1,
    "pipeline": 1
  },
  "zero": 1,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 1,
  "schedule": "1f1b",
  "key": "dp2.tp1.pp1.z1.fp32.ckpt-none.mb1"
}
','ok',1.4407648665112059098e+05,4.44208499857268179766e-01,2.36162999954103725031e-01,186368,'{"params":35328,"grads":35328,"optim":35328,"acts":43968,"workspace":36416,"total":186368}',2.12696815221016557193e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,186368,NULL,'{"forward_ms":0.05028810477369916,"backward_ms":0.047012673746849032,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011274711141595617,"data_comm_ms":0.005237015423237585,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(5,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp2.pp1.z0.fp32.ckpt-none.mb4','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 2,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 4,
  "schedule": "1f1b",
  "key": "dp1.tp2.pp1.z0.fp32.ckpt-none.mb4"
}
','ok',3.48214990320211334614e+05,1.83794499889700091443e-01,6.04500000918051227927e-02,211264,'{"params":18624,"grads":18624,"optim":37248,"acts":109824,"workspace":26944,"total":211264}',139531.408693911,5.35306644439697265625e+00,NULL,1795887407,1795887407,211264,NULL,'{"forward_ms":0.047901062458777233,"backward_ms":0.040024266581895063,"tensor_comm_ms":0.0096184602578307955,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011891676876985002,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(6,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp2.pp1.z0.fp32.ckpt-none.mb2','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 2,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 2,
  "schedule": "1f1b",
  "key": "dp1.tp2.pp1.z0.fp32.ckpt-none.mb2"
}
','ok',2.40635880146321025677e+05,2.65962000185027136467e-01,1.11075999939203029498e-01,142912,'{"params":18624,"grads":18624,"optim":37248,"acts":54912,"workspace":13504,"total":142912}',2.88971446752907591866e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,142912,NULL,'{"forward_ms":0.053891893855961825,"backward_ms":0.050076316938429954,"tensor_comm_ms":0.016011514237649301,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011891676876985002,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(7,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp2.pp1.z0.fp32.ckpt-none.mb1','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 2,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 1,
  "schedule": "1f1b",
  "key": "dp1.tp2.pp1.z0.fp32.ckpt-none.mb1"
}
','ok',75170.6608783648,8.51396000143722631037e-01,4.79766000353265553712e-01,108736,'{"params":18624,"grads":18624,"optim":37248,"acts":27456,"workspace":6784,"total":108736}',1.97160108208850375381e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,108736,NULL,'{"forward_ms":0.066029048696236714,"backward_ms":0.070396742330558482,"tensor_comm_ms":0.028797622197286314,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011891676876985002,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(8,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp2.tp1.pp1.z0.fp32.ckpt-none.mb1','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 2,
    "tensor": 1,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 1,
  "schedule": "1f1b",
  "key": "dp2.tp1.pp1.z0.fp32.ckpt-none.mb1"
}
','ok',3.15929251266958366611e+05,2.02577000209203106351e-01,1.24876999507250729948e-01,195584,'{"params":35328,"grads":35328,"optim":70656,"acts":43968,"workspace":10304,"total":195584}',1.31888102032964263344e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,195584,NULL,'{"forward_ms":0.05028810477369916,"backward_ms":0.047012673746849032,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.021736334019806236,"data_comm_ms":0.0052933283175031366,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(9,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp1.pp1.z0.fp32.ckpt-none.mb4','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 1,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 4,
  "schedule": "1f1b",
  "key": "dp1.tp1.pp1.z0.fp32.ckpt-none.mb4"
}
','ok',3.50765655798934050842e+05,1.82457999926555203273e-01,6.37999983155168592929e-03,358144,'{"params":35328,"grads":35328,"optim":70656,"acts":175872,"workspace":40960,"total":358144}',1.45184810637769027381e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,358144,NULL,'{"forward_ms":0.081429767561758126,"backward_ms":0.062590552033725544,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.021736334019806236,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(10,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp1.pp1.z0.fp32.ckpt-none.mb2','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 1,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 2,
  "schedule": "1f1b",
  "key": "dp1.tp1.pp1.z0.fp32.ckpt-none.mb2"
}
','ok',3.17245515804458875206e+05,2.01736500002880347892e-01,6.68099983158754184842e-03,249728,'{"params":35328,"grads":35328,"optim":70656,"acts":87936,"workspace":20480,"total":249728}',3.18882814293498580799e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,249728,NULL,'{"forward_ms":0.087892205669959367,"backward_ms":0.072700951591286866,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.021736334019806236,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(11,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp1.pp1.z0.fp32.ckpt-none.mb1','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 1,
    "pipeline": 1
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 1,
  "schedule": "1f1b",
  "key": "dp1.tp1.pp1.z0.fp32.ckpt-none.mb1"
}
','ok',2.70850173366503440782e+05,2.36292999943543691188e-01,6.23000050836708396673e-03,195520,'{"params":35328,"grads":35328,"optim":70656,"acts":43968,"workspace":10240,"total":195520}',2.68064355826539802373e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,195520,NULL,'{"forward_ms":0.10057620954739832,"backward_ms":0.094025347493698064,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.021736334019806236,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(12,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp1.pp2.z0.fp32.ckpt-none.mb1.1f1b','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 1,
    "pipeline": 2
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 1,
  "schedule": "1f1b",
  "virtual_stages": 1,
  "partition": "uniform",
  "key": "dp1.tp1.pp2.z0.fp32.ckpt-none.mb1.1f1b"
}
','ok',2.59152329247799323636e+05,2.46958999696289538405e-01,9.62839999374409671872e-02,149376,'{"params":26432,"grads":26432,"optim":52864,"acts":32320,"workspace":11328,"total":149376}',1.84677008541012532081e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,149376,0.2,'{"forward_ms":0.074262914324663143,"backward_ms":0.055356422876684519,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0041338142997394065,"bubble_ms":0.033438287875271741,"optimizer_ms":0.01668515324126929,"data_comm_ms":0.0017093195396209917,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(13,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp1.pp2.z0.fp32.ckpt-none.mb1.gpipe','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 1,
    "pipeline": 2
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 1,
  "schedule": "gpipe",
  "virtual_stages": 1,
  "partition": "uniform",
  "key": "dp1.tp1.pp2.z0.fp32.ckpt-none.mb1.gpipe"
}
','ok',2.54624518487587425631e+05,0.251350499866021,1.12637999791331822052e-01,189440,'{"params":26432,"grads":26432,"optim":52864,"acts":72384,"workspace":11328,"total":189440}',2.59152329247799323636e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,189440,0.2,'{"forward_ms":0.074262914324663143,"backward_ms":0.055356422876684519,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0041338142997394065,"bubble_ms":0.033438287875271741,"optimizer_ms":0.01668515324126929,"data_comm_ms":0.0017093195396209917,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(14,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp1.pp2.z0.fp32.ckpt-none.mb2.1f1b','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 1,
    "pipeline": 2
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 2,
  "schedule": "1f1b",
  "virtual_stages": 1,
  "partition": "uniform",
  "key": "dp1.tp1.pp2.z0.fp32.ckpt-none.mb2.1f1b"
}
','ok',2.83490027797098155136e+05,2.25757500174950109794e-01,8.18429998616920784115e-02,192960,'{"params":26432,"grads":26432,"optim":52864,"acts":64640,"workspace":22592,"total":192960}',2.53486725066789309501e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,192960,3.33333333333333314829e-01,'{"forward_ms":0.067194971222761524,"backward_ms":0.043747057247855992,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0021792609913399317,"bubble_ms":0.056560644730978701,"optimizer_ms":0.01668515324126929,"data_comm_ms":0.0017093195396209917,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(15,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp1.pp2.z0.fp32.ckpt-none.mb2.gpipe','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 1,
    "pipeline": 2
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 2,
  "schedule": "gpipe",
  "virtual_stages": 1,
  "partition": "uniform",
  "key": "dp1.tp1.pp2.z0.fp32.ckpt-none.mb2.gpipe"
}
','ok',2.82587530317027354614e+05,2.26478500053417519666e-01,8.16830001895141322165e-02,218304,'{"params":26432,"grads":26432,"optim":52864,"acts":89984,"workspace":22592,"total":218304}',2.83490027797098155136e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,218304,3.33333333333333314829e-01,'{"forward_ms":0.067194971222761524,"backward_ms":0.043747057247855992,"tensor_comm_ms":0.0,"pipeline_comm_ms":0.0021792609913399317,"bubble_ms":0.056560644730978701,"optimizer_ms":0.01668515324126929,"data_comm_ms":0.0017093195396209917,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(16,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb2','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 2,
    "pipeline": 1,
    "sequence_parallel": true
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 2,
  "schedule": "1f1b",
  "key": "dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb2"
}
','ok',2.52716704538791411328e+05,2.53248000035455334e-01,1.35934000354609452188e-01,134336,'{"params":18624,"grads":18624,"optim":37248,"acts":44032,"workspace":15808,"total":134336}',8.65974835621767415408e+04,5.35306644439697265625e+00,NULL,1795887407,1795887407,134336,NULL,'{"forward_ms":0.051687464804217598,"backward_ms":0.047696131787233753,"tensor_comm_ms":0.020065036889728712,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011891676876985002,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
INSERT INTO "runs" VALUES(17,1,'558a67ad089b4379','cpu:AMD EPYC (1 threads):24105MiBx2','dryrun','dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb1','{
  "format": "autoaccel-strategy",
  "version": 1,
  "parallel": {
    "data": 1,
    "tensor": 2,
    "pipeline": 1,
    "sequence_parallel": true
  },
  "zero": 0,
  "amp": "fp32",
  "loss_scaling": {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "skip_if_nonfinite": false,
  "checkpoint": "none",
  "checkpoint_layers": 0,
  "micro_batch": 1,
  "schedule": "1f1b",
  "key": "dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb1"
}
','ok',7.07181539131751487736e+04,9.05000999864569166675e-01,4.50112000180524773895e-01,104576,'{"params":18624,"grads":18624,"optim":37248,"acts":22016,"workspace":8064,"total":104576}',1.24260818574268196243e+05,5.35306644439697265625e+00,NULL,1795887407,1795887407,104576,NULL,'{"forward_ms":0.063370429472797696,"backward_ms":0.067409220264380565,"tensor_comm_ms":0.036651613977419818,"pipeline_comm_ms":0.0,"bubble_ms":0.0,"optimizer_ms":0.011891676876985002,"data_comm_ms":0.0,"ops_estimated":0,"links_estimated":0}');
CREATE INDEX runs_by_model_hardware_status ON runs(model_hash, hardware, status);
CREATE INDEX runs_by_job ON runs(job_id);
CREATE INDEX jobs_by_model_hardware ON jobs(model_hash, hardware);
COMMIT;
