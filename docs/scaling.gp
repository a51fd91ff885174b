# gnuplot -e "in='docs/scaling_cpu_small.csv'; out='docs/scaling_cpu_small.svg'" docs/scaling.gp
set terminal svg size 640,400
set output out
set datafile separator ","
set logscale x 2
set xlabel "num_envs"
set ylabel "agent-steps/s"
set title "moonrl training throughput, small net, CPU (2 cores)"
set yrange [0:*]
set grid
plot in using 1:2 skip 1 with linespoints title "moonrl"
